"""The repository source breaks one function of a cached project per task, its tests fail the broken code and
pass the oracle, its splits are fixed by the seed, and it never builds without its pinned, verified cache."""

from __future__ import annotations

import ast
import difflib
import hashlib
import io
import os
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from harness_rl.envs.sources import get_builder
from harness_rl.envs.sources.repo import RepoBuilder
from harness_rl.envs.sources.repo_fetch import PROJECTS, Project, default_cache_dir, fetch, sdist_path
from harness_rl.envs.sources.repo_mutate import OPERATORS, is_valid, mutations
from harness_rl.envs.sources.repo_tests import parse_report

TINY_CODE = '''"""A tiny calculator, the fixture project."""


def clamp(x, low=0, high=10):
    """Limit x to [low, high]."""
    if x < low:
        return low
    if x > high:
        return high
    return x


def is_between(x, low, high, inclusive=True):
    """Whether x lies between low and high."""
    if inclusive:
        return low <= x and x <= high
    return low < x and x < high


def total(values):
    """Sum of values, plus nothing."""
    result = 0
    for v in values:
        result = result + v
    return result


def none_negative(values):
    """Whether no value is negative."""
    return not any(v < 0 for v in values)
'''

TINY_TESTS = """from tinycalc import clamp, is_between, none_negative, total


def test_clamp_low():
    assert clamp(-5) == 0


def test_clamp_high():
    assert clamp(50) == 10


def test_clamp_inside():
    assert clamp(3) == 3


def test_is_between_inclusive():
    assert is_between(1, 1, 2)
    assert not is_between(3, 1, 2)


def test_is_between_exclusive():
    assert not is_between(1, 1, 2, inclusive=False)
    assert is_between(2, 1, 3, inclusive=False)


def test_total():
    assert total([1, 2, 3]) == 6
    assert total([]) == 0


def test_none_negative():
    assert none_negative([0, 1])
    assert not none_negative([1, -1])
"""


def _tiny_sdist(cache: Path) -> Project:
    """Write the fixture project's sdist into ``cache`` and return its pin."""
    files = {
        "tinycalc/__init__.py": TINY_CODE,
        "tests/test_tinycalc.py": TINY_TESTS,
        "LICENSE": "MIT, for the test fixture\n",
        "pyproject.toml": '[project]\nname = "tinycalc"\nversion = "0.1"\n',
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"tinycalc-0.1/{rel}")
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "tinycalc-0.1.tar.gz").write_bytes(buf.getvalue())
    sha = hashlib.sha256(buf.getvalue()).hexdigest()
    return Project("tinycalc", "0.1", sha, ("tinycalc",), ("tests",))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cache = tmp_path_factory.mktemp("repo-cache")
    project = _tiny_sdist(cache)
    # 4 tasks in groups of 1 or 2 (a function gives at most 2): 2 held-out is always reachable.
    builder = RepoBuilder(cache, projects=(project,), n_tasks=4, n_heldout=2, jobs=2)
    return builder, list(builder.build(seed=0))


def _run(script: Path, cwd: Path, **env: Path) -> None:
    full = {**os.environ, "HRL_PYTHON": sys.executable, **{k: str(v) for k, v in env.items()}}
    subprocess.run(["bash", str(script)], cwd=cwd, env=full, check=True, timeout=120)


def _score(spec, root: Path, *, oracle: bool) -> str:
    """Lay the task out per the TaskSpec contract, optionally run solve.sh, then test.sh; the reward file."""
    for part, files in (("ws", spec.workspace), ("tests", spec.tests), ("solution", spec.solution)):
        for rel, content in files.items():
            path = root / part / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
    if oracle:
        _run(root / "solution" / "solve.sh", root / "ws", HRL_SOLUTION_DIR=root / "solution")
    logs = root / "logs"
    _run(
        root / "tests" / "test.sh",
        root / "ws",
        HRL_WORKSPACE=root / "ws",
        HRL_TESTS_DIR=root / "tests",
        HRL_LOGS_DIR=logs,
    )
    return (logs / "reward.json").read_text().strip()


def docstrings(text: str) -> list[str | None]:
    return [ast.get_docstring(n) for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]


def test_mutations_change_one_spot_and_keep_the_rest_of_the_file():
    found = {op: [] for op in OPERATORS}
    for m in mutations("tinycalc/__init__.py", TINY_CODE):
        assert is_valid(m, TINY_CODE), m.key
        assert not is_valid(replace(m, source=m.source + "\n)"), TINY_CODE)
        found[m.operator].append(m)
        diff = [
            line
            for line in difflib.unified_diff(TINY_CODE.splitlines(), m.source.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and line[:3] not in ("+++", "---")
        ]
        if m.operator == "body_deleted":
            assert diff[-1] == "+    raise NotImplementedError"
            assert docstrings(m.source) == docstrings(TINY_CODE)
        else:
            assert len(diff) == 2, (m.key, diff)  # one line out, one line in
    assert all(found[op] for op in OPERATORS), {op: len(v) for op, v in found.items()}
    flipped = {m.source.splitlines()[m.lineno - 1].strip() for m in found["compare_flipped"]}
    assert "if x <= low:" in flipped and "return low < x and x <= high" in flipped
    assert any("return any(" in m.source for m in found["not_removed"])
    assert any("def clamp(x, low=1, high=10):" in m.source for m in found["default_changed"])


def test_short_summary_parsing_counts_a_failed_subtest_as_a_failure():
    out = (
        "PASSED t.py::test_a\nPASSED t.py::T::test_s\nPASSED t.py::test_p[a - b]\n"
        "SUBFAILED(i=2) t.py::T::test_s - AssertionError: 2 not less than 2\n"
        "FAILED t.py::test_p[c - d] - assert 0\nERROR t.py::test_e - fixture\n1 failed, 2 passed\n"
    )
    passed, failed = parse_report(out, known=["t.py::test_p[c - d]", "t.py::T::test_s"])
    assert passed == {"t.py::test_a", "t.py::test_p[a - b]"}
    assert failed == {"t.py::T::test_s", "t.py::test_p[c - d]", "t.py::test_e"}


def test_build_without_the_cache_names_the_fetch_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="harness_rl.envs.sources.repo fetch"):
        list(RepoBuilder(tmp_path / "empty").build(n=1))


def test_a_cached_sdist_with_another_sha256_is_refused(tmp_path):
    project = _tiny_sdist(tmp_path)
    (tmp_path / "tinycalc-0.1.tar.gz").write_bytes(b"not the pinned file")
    with pytest.raises(ValueError, match="sha256"):
        sdist_path(project, tmp_path)


def test_fetch_does_not_download_what_is_cached(tmp_path, monkeypatch):
    project = _tiny_sdist(tmp_path)

    def no_network(*args, **kwargs):
        raise AssertionError("fetch ran pip although the sdist was cached")

    monkeypatch.setattr(subprocess, "run", no_network)
    assert fetch(tmp_path, (project,)) == [tmp_path / "tinycalc-0.1.tar.gz"]


def test_pins_are_exact_and_the_cache_folder_can_be_moved(monkeypatch, tmp_path):
    assert len({p.name for p in PROJECTS}) == len(PROJECTS) >= 8
    assert all(len(p.sha256) == 64 and p.version[0].isdigit() for p in PROJECTS)
    monkeypatch.setenv("HRL_REPO_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path
    assert get_builder("repo").cache_dir == tmp_path


def test_tiny_project_tasks_split_and_hide_the_tests(tiny):
    builder, tasks = tiny
    assert len(tasks) == 4 and len({t.id for t in tasks}) == 4
    assert sorted(t.split for t in tasks) == ["heldout", "heldout", "train", "train"]
    held = {t.group for t in tasks if t.split == "heldout"}
    assert held.isdisjoint(t.group for t in tasks if t.split == "train")
    for t in tasks:
        assert t.source == "repo" and not any(rel.startswith("tests/") for rel in t.workspace)
        assert t.metadata["module"] == "tinycalc/__init__.py"
        assert t.solution["original/tinycalc/__init__.py"] == TINY_CODE.encode()
        assert t.workspace["tinycalc/__init__.py"] != TINY_CODE
        assert t.metadata["function"] in t.instruction and "suite/tests/test_tinycalc.py" in t.tests
        selected = t.tests["selected.txt"].split()
        assert selected and all(s.startswith("tests/test_tinycalc.py::") for s in selected)
    again = list(builder.build(seed=0))
    assert [(t.id, t.split) for t in again] == [(t.id, t.split) for t in tasks]
    assert [t.id for t in builder.build(seed=0, split="heldout")] == [t.id for t in tasks if t.split == "heldout"]
    with pytest.raises(ValueError):
        list(builder.build(n=5))


def test_tiny_project_oracle_passes_and_the_untouched_workspace_fails(tiny, tmp_path):
    _, tasks = tiny
    for i, spec in enumerate(tasks):
        assert _score(spec, tmp_path / f"empty{i}", oracle=False) == '{"reward": 0.0}', spec.id
        assert _score(spec, tmp_path / f"oracle{i}", oracle=True) == '{"reward": 1.0}', spec.id


def test_a_conftest_added_by_the_agent_does_not_reach_the_verifier(tiny, tmp_path):
    _, tasks = tiny
    spec = tasks[0]
    # A conftest that reports every test passed: it works wherever pytest loads it.
    cheat = (
        "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
    )
    hacked = {**spec.workspace, "tinycalc/conftest.py": cheat, "conftest.py": cheat}
    assert _score(replace(spec, workspace=hacked), tmp_path, oracle=False) == '{"reward": 0.0}'


@pytest.mark.slow
def test_real_cache_builds_valid_tasks(tmp_path):
    """On the fetched sdists (``python -m harness_rl.envs.sources.repo fetch``): a few tasks, each valid."""
    builder = RepoBuilder(n_tasks=6, n_heldout=2)  # even counts: the group draw always lands (see _heldout_groups)
    tasks = list(builder.build(seed=0))
    assert len({t.metadata["project"] for t in tasks}) >= 3  # projects are interleaved, 2 tasks a function at most
    for i, spec in enumerate(tasks):
        assert _score(spec, tmp_path / f"empty{i}", oracle=False) == '{"reward": 0.0}', spec.id
        assert _score(spec, tmp_path / f"oracle{i}", oracle=True) == '{"reward": 1.0}', spec.id


def _text(content: str | bytes) -> str:
    return content.decode() if isinstance(content, bytes) else content


def _solved(spec) -> dict:
    """The workspace after the oracle: the original file back in place."""
    module = spec.metadata["module"]
    return {**spec.workspace, module: _text(spec.solution[f"original/{module}"])}


@pytest.mark.parametrize("where", ["package", "imported_module"])
def test_exiting_0_during_collection_scores_0(tiny, tmp_path, where):
    """Code that ends pytest with status 0 before any test ran (``os._exit(0)`` in the package's __init__, or
    in a module it imports) earns nothing: the reward comes from the per-test outcomes. (A conftest.py would
    do the same, but the verifier deletes those from the code folders: test above.)"""
    _, tasks = tiny
    spec = tasks[0]
    solved = _solved(spec)
    module = spec.metadata["module"]
    broken = _text(spec.workspace[module])
    if where == "package":
        hacked = {**spec.workspace, module: broken + "\nimport os\nos._exit(0)\n"}
    else:
        boot = {"tinycalc/_boot.py": "import os\nos._exit(0)\n"}
        hacked = {**spec.workspace, **boot, module: "from tinycalc import _boot  # noqa\n" + broken}
    assert _score(replace(spec, workspace=hacked), tmp_path / "hacked", oracle=False) == '{"reward": 0.0}'
    # The same exit in a solved workspace earns nothing either, and the solved workspace alone scores 1.
    solved_hack = {**solved, module: solved[module] + "\nimport os\nos._exit(0)\n"}
    assert _score(replace(spec, workspace=solved_hack), tmp_path / "solved-hack", oracle=False) == '{"reward": 0.0}'
    assert _score(replace(spec, workspace=solved), tmp_path / "solved", oracle=False) == '{"reward": 1.0}'


def test_score_needs_every_selected_test_passed_and_at_least_one():
    from harness_rl.envs.sources.repo_score import reward

    summary = "PASSED t.py::test_a\nPASSED t.py::test_b\n"
    assert reward(summary, ["t.py::test_a", "t.py::test_b"], 0) == 1.0
    assert reward(summary, ["t.py::test_a", "t.py::test_c"], 0) == 0.0  # one selected test never ran
    assert reward("", ["t.py::test_a"], 0) == 0.0  # exit 0, nothing ran
    assert reward(summary, [], 0) == 0.0  # nothing selected
    assert reward(summary + "FAILED t.py::test_b - boom\n", ["t.py::test_a", "t.py::test_b"], 1) == 0.0
    assert reward(summary, ["t.py::test_a", "t.py::test_b"], 2) == 0.0  # interrupted after reporting
