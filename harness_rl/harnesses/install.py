"""Install harnesses at pinned versions under the project-local tools folder (``<repo>/tools`` or
``$HARNESS_RL_TOOLS``).

Python harnesses each get their own venv, ``<tools>/venvs/<name>``: they pin conflicting libraries (hermes
pins openai 2.x, mini-swe-agent's litellm needs 3.x). A stamp file records the pinned requirement and is
written last, so an interrupted install is rebuilt from scratch on the next call, and a call with the stamp
in place is a no-op. Venvs cannot be moved after creation (scripts carry absolute shebangs), so "atomic" here
means stamp-after-success rather than build-then-rename. A lock file serializes concurrent installs.

npm harnesses share one prefix, ``<tools>/npm`` (binaries in ``<tools>/npm/node_modules/.bin``), so common
dependencies are stored once; see ``install_npm_tool``.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)

STAMP_NAME = ".harness_rl_install.json"


@dataclass(frozen=True)
class PythonToolSpec:
    """A Python harness installed with pip into its own venv.

    Attributes:
        name: Install target name (folder under ``venvs/``).
        requirement: The pinned pip requirement.
        binary: The console script that runs the harness.
        python: The interpreter that creates the venv.
    """

    name: str
    requirement: str
    binary: str
    python: str = "python3.11"


PYTHON_TOOLS: dict[str, PythonToolSpec] = {
    "mini_swe_agent": PythonToolSpec("mini_swe_agent", "mini-swe-agent==2.4.6", "mini"),
    "hermes": PythonToolSpec("hermes", "hermes-agent==0.19.0", "hermes"),
}


def tools_dir() -> Path:
    """The project-local tools folder: ``$HARNESS_RL_TOOLS`` or ``<repo>/tools``."""
    if env := os.environ.get("HARNESS_RL_TOOLS"):
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parents[2] / "tools"


def venv_dir(spec: PythonToolSpec, tools: Path | None = None) -> Path:
    """Where the harness's venv lives."""
    return (tools or tools_dir()) / "venvs" / spec.name


def install_command(name: str) -> str:
    """The exact command a user runs to install this harness (quoted in error messages)."""
    return f"python -m harness_rl.harnesses install {name}"


def read_stamp(spec: PythonToolSpec, tools: Path | None = None) -> dict | None:
    """The install stamp, or None when the harness is not (completely) installed at the pinned version."""
    venv = venv_dir(spec, tools)
    try:
        stamp = json.loads((venv / STAMP_NAME).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if stamp.get("requirement") != spec.requirement or not (venv / "bin" / spec.binary).exists():
        return None
    return stamp


def install_python_tool(spec: PythonToolSpec, tools: Path | None = None, *, force: bool = False) -> Path:
    """Install ``spec`` into its venv unless the stamp says it is there; returns the binary's path.

    Raises:
        RuntimeError: The interpreter is missing or pip failed (with pip's output tail).
    """
    venv = venv_dir(spec, tools)
    binary = venv / "bin" / spec.binary
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{spec.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and read_stamp(spec, tools) is not None:
            logger.info("%s already installed at %s", spec.requirement, venv)
            return binary
        python = shutil.which(spec.python)
        if python is None:
            raise RuntimeError(f"{spec.python} not found on PATH; it is needed to create the {spec.name} venv")
        if venv.exists():  # a partial or outdated install: start clean
            shutil.rmtree(venv)
        start = time.monotonic()
        logger.info("installing %s into %s", spec.requirement, venv)
        _check([python, "-m", "venv", str(venv)])
        pip = [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--no-input",
            "--disable-pip-version-check",
        ]
        _check([*pip, "-q", spec.requirement])
        if not binary.exists():
            raise RuntimeError(f"{spec.requirement} installed but {binary} is missing")
        stamp = {"requirement": spec.requirement, "seconds": round(time.monotonic() - start, 1),
                 "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}  # fmt: skip
        tmp = venv / f"{STAMP_NAME}.tmp"
        tmp.write_text(json.dumps(stamp))
        tmp.replace(venv / STAMP_NAME)
        logger.info("installed %s in %.1f s", spec.requirement, stamp["seconds"])
        return binary


def _check(cmd: list[str], env: dict[str, str] | None = None) -> None:
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"command failed ({done.returncode}): {' '.join(cmd)}\n{tail}")


# ---------------------------------------------------------------------------------------------------------
# npm harnesses: one shared prefix
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NpmToolSpec:
    """An npm harness installed into the shared project-local prefix ``<tools>/npm``.

    Attributes:
        name: Install target name (the HARNESSES key, e.g. "claude_code").
        package: The npm package name.
        version: The pinned exact version.
        binary: The command it installs into ``node_modules/.bin``.
    """

    name: str
    package: str
    version: str
    binary: str

    @property
    def requirement(self) -> str:
        """``package@version``, as given to ``npm install``."""
        return f"{self.package}@{self.version}"


NPM_TOOLS: dict[str, NpmToolSpec] = {
    "pi": NpmToolSpec("pi", "@mariozechner/pi-coding-agent", "0.73.1", "pi"),
    "opencode": NpmToolSpec("opencode", "opencode-ai", "1.18.33", "opencode"),
    "claude_code": NpmToolSpec("claude_code", "@anthropic-ai/claude-code", "2.1.332", "claude"),
    "codex": NpmToolSpec("codex", "@openai/codex", "0.171.0", "codex"),
}

#: npm options for every install: exact pins, quiet, and none of npm's own outbound extras.
_NPM_FLAGS = ("--no-audit", "--no-fund", "--no-update-notifier", "--save-exact", "--loglevel=error")


def npm_prefix(tools: Path | None = None) -> Path:
    """The shared npm prefix of all npm harnesses: ``<tools>/npm``."""
    return (tools or tools_dir()) / "npm"


def npm_binary(spec: NpmToolSpec, tools: Path | None = None) -> Path:
    """Where the harness's command ends up: ``<tools>/npm/node_modules/.bin/<binary>``."""
    return npm_prefix(tools) / "node_modules" / ".bin" / spec.binary


def npm_package_dir(package: str, prefix: Path) -> Path:
    """The installed package's folder under ``prefix``."""
    return prefix / "node_modules" / package


def installed_npm_version(package: str, prefix: Path) -> str | None:
    """The version recorded in the installed package's package.json, or None when it is absent."""
    try:
        return json.loads((npm_package_dir(package, prefix) / "package.json").read_text()).get("version")
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _npm_stamp_path(name: str, prefix: Path) -> Path:
    return prefix / ".stamps" / f"{name}.json"


def read_npm_stamp(spec: NpmToolSpec, tools: Path | None = None) -> dict | None:
    """The install stamp, or None when the harness is not (completely) installed at the pinned version.

    Besides the stamp, the package's own package.json must carry the pinned version and the binary must
    exist: a later install into the shared prefix could in principle have replaced it.
    """
    prefix = npm_prefix(tools)
    try:
        stamp = json.loads(_npm_stamp_path(spec.name, prefix).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if (
        stamp.get("requirement") != spec.requirement
        or installed_npm_version(spec.package, prefix) != spec.version
        or not npm_binary(spec, tools).exists()
    ):
        return None
    return stamp


def npm_install(prefix: Path, requirements: list[str], *, tools: Path | None = None) -> float:
    """Run ``npm install --prefix prefix requirements...`` with npm isolated from the user's HOME.

    Postinstall scripts run (claude-code and opencode link their native binary there; with
    ``--ignore-scripts`` neither command works), but HOME points at a scratch folder that is deleted
    afterwards: opencode's postinstall runs ``opencode --version``, which creates ``~/.local/share/opencode``
    and friends under whatever HOME is. The download cache is kept in ``<tools>/npm-cache`` so a reinstall
    does not download again. The caller holds the npm lock.

    Returns:
        Seconds the install took.

    Raises:
        RuntimeError: npm is missing or failed (with its output tail).
    """
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm not found on PATH; install Node.js >= 20 (apt-get install -y nodejs npm)")
    tools = tools or tools_dir()
    prefix.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="npm-home-", dir=tools))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "npm_config_", "NPM_CONFIG_"))}
    env.update(
        {
            "HOME": str(scratch),
            "npm_config_cache": str(tools / "npm-cache"),
            "npm_config_update_notifier": "false",
            "npm_config_fund": "false",
            "npm_config_audit": "false",
        }
    )
    start = time.monotonic()
    try:
        _check([npm, "install", "--prefix", str(prefix), *_NPM_FLAGS, *requirements], env=env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return time.monotonic() - start


def npm_lock(tools: Path | None = None) -> Any:
    """An exclusive lock over the shared npm prefix (context manager); npm must not run twice on it."""
    return _FileLock((tools or tools_dir()) / ".npm.lock")


def install_npm_tool(spec: NpmToolSpec, tools: Path | None = None, *, force: bool = False) -> Path:
    """Install ``spec`` into the shared prefix unless its stamp says it is there; returns the binary's path.

    Installing one harness keeps the others (npm records each in the prefix's package.json). The stamp,
    ``<tools>/npm/.stamps/<name>.json``, is written after npm succeeded, so an interrupted install is
    simply redone.

    Raises:
        RuntimeError: npm is missing or failed, or the binary is missing afterwards.
    """
    prefix = npm_prefix(tools)
    binary = npm_binary(spec, tools)
    with npm_lock(tools):
        if not force and read_npm_stamp(spec, tools) is not None:
            logger.info("%s already installed in %s", spec.requirement, prefix)
            return binary
        _npm_stamp_path(spec.name, prefix).unlink(missing_ok=True)
        logger.info("installing %s into %s", spec.requirement, prefix)
        seconds = npm_install(prefix, [spec.requirement], tools=tools)
        if installed_npm_version(spec.package, prefix) != spec.version or not binary.exists():
            raise RuntimeError(f"{spec.requirement} installed but {binary} is missing or has another version")
        write_stamp(_npm_stamp_path(spec.name, prefix), {"requirement": spec.requirement, "seconds": round(seconds, 1)})
        logger.info("installed %s in %.1f s", spec.requirement, seconds)
        return binary


def install_npm_into(prefix: Path, requirements: list[str], *, tools: Path | None = None, force: bool = False) -> Path:
    """Install pinned npm packages into a prefix of their own (e.g. a template HOME), idempotently.

    Used for packages a harness expects next to its config rather than on PATH (opencode's plugin SDK in
    ``~/.config/opencode``). The stamp ``<prefix>/.harness_rl_install.json`` records the requirements.

    Args:
        prefix: The folder that gets ``package.json`` and ``node_modules``.
        requirements: Exact ``package@version`` pins.
        tools: The tools folder (its npm lock and cache are used).
        force: Reinstall even when the stamp matches.

    Returns:
        ``prefix``.
    """
    stamp_path = prefix / STAMP_NAME
    with npm_lock(tools):
        if not force and _npm_into_stamp_ok(prefix, requirements):
            return prefix
        stamp_path.unlink(missing_ok=True)
        seconds = npm_install(prefix, requirements, tools=tools)
        if not _npm_versions_ok(prefix, requirements):
            raise RuntimeError(f"npm installed {requirements} into {prefix} but the versions do not match")
        write_stamp(stamp_path, {"requirements": list(requirements), "seconds": round(seconds, 1)})
        return prefix


def _npm_into_stamp_ok(prefix: Path, requirements: list[str]) -> bool:
    try:
        stamp = json.loads((prefix / STAMP_NAME).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    return stamp.get("requirements") == list(requirements) and _npm_versions_ok(prefix, requirements)


def _npm_versions_ok(prefix: Path, requirements: list[str]) -> bool:
    for req in requirements:
        package, _, version = req.rpartition("@")  # scoped names start with "@": split at the last one
        if installed_npm_version(package, prefix) != version:
            return False
    return True


def write_stamp(path: Path, data: dict) -> None:
    """Write a JSON stamp atomically (tmp file, then rename), adding the install time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**data, "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
    tmp.replace(path)


class _FileLock:
    """``flock`` on a lock file, as a context manager (blocks until the lock is free)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] | None = None

    def __enter__(self) -> _FileLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "w")
        fcntl.flock(self._fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._fh is not None
        self._fh.close()  # closing releases the lock
        self._fh = None
