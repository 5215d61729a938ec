"""The pinned projects of the repository source, and their sdist cache.

The repository source builds tasks from real small open-source Python projects. Each is pinned to one source
distribution (name, exact version, sha256) taken from the package registry once, at install time, by
``python -m harness_rl.envs.sources.repo fetch``; building tasks then reads only the cache, so it works offline.
The cache folder is ``$HRL_REPO_CACHE``, else ``repo/`` in the project's cache (``$HARNESS_RL_CACHE``, default
``~/.cache/harness_rl``, beside the models and built tasks): sdists in it, test-run results under ``runs/``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

CACHE_ENV = "HRL_REPO_CACHE"
FETCH_COMMAND = "python -m harness_rl.envs.sources.repo fetch"

#: Files copied from the sdist root next to the tests: the project's own pytest configuration.
CONFIG_FILES = ("pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini")
#: Files from the sdist root given to the agent for context (licence first: the code is someone's work).
CONTEXT_FILES = ("LICENSE", "LICENSE.txt", "LICENCE", "README.rst", "README.md", *CONFIG_FILES)


@dataclass(frozen=True)
class Project:
    """One pinned project.

    Attributes:
        name: Its name on the package registry.
        version: The exact version.
        sha256: The sha256 of its sdist; a download that differs is rejected.
        sources: Paths (folders or files) under the sdist root holding the importable code; mutations are made
            here and these are what the agent edits.
        tests: Paths under the sdist root holding the project's tests (may lie inside a source folder).
        skip_tests: Test files (under ``tests``) left out because they need a package we do not install.
    """

    name: str
    version: str
    sha256: str
    sources: tuple[str, ...]
    tests: tuple[str, ...]
    skip_tests: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Filesystem-safe ``name-version``."""
        return f"{self.name}-{self.version}".lower()

    def is_test_path(self, rel: str) -> bool:
        """Whether ``rel`` (a path under the sdist root) belongs to the tests."""
        p = PurePosixPath(rel)
        return any(p == PurePosixPath(t) or PurePosixPath(t) in p.parents for t in self.tests)


# Chosen for: pure Python, tests shipped in the sdist, tests that pass offline with only pytest (+ hypothesis,
# which the project already has) in a few seconds, and many small documented functions to break.
PROJECTS: tuple[Project, ...] = (
    Project(
        "boltons",
        "26.2.0",
        "d39cfd15c1a1c3bd4d705c82252fa9edb8e4f5e8cc039f8e39afac7b1b47e92c",
        ("boltons",),
        ("tests",),
    ),
    Project(
        "humanize",
        "4.17.0",
        "1d6a36c453dbfbb3f0b34601d2e0b4ce5d48d780305cd45714843f0068fde6ac",
        ("src/humanize",),
        ("tests",),
        # These need freezegun or pytest-benchmark, which the project does not install.
        skip_tests=("tests/test_time.py", "tests/test_i18n.py", "tests/test_benchmarks.py"),
    ),
    Project(
        "inflection",
        "0.5.1",
        "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
        ("inflection",),
        ("test_inflection.py",),
    ),
    Project(
        "more-itertools",
        "11.2.1",
        "cbf08fd0af284dc69718b9b76a8e6203df624d70209ea511e4219d350c856f63",
        ("more_itertools",),
        ("tests",),
    ),
    Project(
        "parse", "1.22.4", "706d458feed5a81b02768d3156e8070baf6cee7d150a3a3c0cd43101a875c3b5", ("parse",), ("tests",)
    ),
    Project(
        "python-slugify",
        "9.1.3",
        "90e997f2e0987239ce95e12f700086eb18e1d1d3ee22624fbbdbd095afca42b6",
        ("slugify",),
        ("tests",),
    ),
    Project(
        "six",
        "1.17.0",
        "ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81",
        ("six.py",),
        ("test_six.py",),
    ),
    Project(
        "tabulate",
        "0.10.0",
        "e2cfde8f79420f6deeffdeda9aaec3b6bc5abce947655d17ac662b126e48a60d",
        ("tabulate",),
        ("test",),
    ),
    Project(
        "toolz",
        "1.2.0",
        "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490",
        ("toolz", "tlz"),
        ("toolz/tests",),
    ),
    Project(
        "webcolors",
        "25.10.0",
        "62abae86504f66d0f6364c2a8520de4a0c47b80c03fc3a5f1815fedbef7c19bf",
        ("src/webcolors",),
        ("tests",),
    ),
)


def default_cache_dir() -> Path:
    """``$HRL_REPO_CACHE``, else ``$HARNESS_RL_CACHE/repo``, else ``~/.cache/harness_rl/repo``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("HARNESS_RL_CACHE") or Path.home() / ".cache" / "harness_rl") / "repo"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sdist_name(project: Project) -> str:
    # Registries normalise sdist names differently over time (python_slugify vs python-slugify); the cache uses
    # one name of its own so that look-ups never depend on that.
    return f"{project.key}.tar.gz"


def sdist_path(project: Project, cache_dir: Path) -> Path:
    """The verified sdist of ``project`` in ``cache_dir``.

    Raises:
        FileNotFoundError: It is not there (the message names the fetch command).
        ValueError: It is there but its sha256 differs from the pinned one.
    """
    path = Path(cache_dir) / _sdist_name(project)
    if not path.is_file():
        raise FileNotFoundError(
            f"the sdist of {project.name}=={project.version} is not in {cache_dir}; run `{FETCH_COMMAND}` "
            f"(with --cache {cache_dir} or ${CACHE_ENV} if not the default) once, online"
        )
    digest = _sha256(path)
    if digest != project.sha256:
        raise ValueError(f"{path}: sha256 {digest} is not the pinned {project.sha256}; delete it and fetch again")
    return path


def fetch(cache_dir: Path | None = None, projects: tuple[Project, ...] = PROJECTS) -> list[Path]:
    """Download every pinned sdist not yet cached (pip, from the package registry) and verify its sha256.

    Idempotent: a cached, verified sdist is not downloaded again.

    Returns:
        The cached sdist paths, in ``projects`` order.
    """
    cache_dir = Path(cache_dir or default_cache_dir())
    cache_dir.mkdir(parents=True, exist_ok=True)
    missing = [p for p in projects if not (cache_dir / _sdist_name(p)).is_file()]
    if missing:
        with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", tmp]
            cmd += [f"{p.name}=={p.version}" for p in missing]
            subprocess.run(cmd, check=True)
            for p in missing:
                got = [f for f in Path(tmp).iterdir() if _sha256(f) == p.sha256]
                if not got:
                    raise ValueError(f"pip downloaded no sdist of {p.name}=={p.version} with sha256 {p.sha256}")
                os.replace(got[0], cache_dir / _sdist_name(p))
    return [sdist_path(p, cache_dir) for p in projects]


def extract(project: Project, cache_dir: Path, dest: Path) -> Path:
    """Unpack the cached sdist of ``project`` into ``dest`` and return the sdist's root folder there."""
    with tarfile.open(sdist_path(project, cache_dir)) as tar:
        # The "data" filter refuses absolute paths, links out of dest and device files.
        tar.extractall(dest, filter="data")
    (root,) = [p for p in Path(dest).iterdir() if p.is_dir()]
    return root


def read_tree(root: Path, rels: tuple[str, ...]) -> dict[str, bytes]:
    """Every file under the given paths of ``root`` (files or folders), as relative POSIX path -> bytes."""
    out: dict[str, bytes] = {}
    for rel in rels:
        base = root / rel
        files = [base] if base.is_file() else sorted(f for f in base.rglob("*") if f.is_file())
        for f in files:
            if "__pycache__" not in f.parts and f.suffix not in (".pyc", ".pyo"):
                out[f.relative_to(root).as_posix()] = f.read_bytes()
    return out
