"""Running a project's own tests: at build time (baseline and mutants, cached) and in the task's verifier.

Both sides run pytest the same way, so a test picked at build time behaves the same in ``tests/test.sh``:
a fresh run folder holds the project's code and, laid over it, its test files and pytest configuration;
pytest runs there with plugin autoloading off (only what the project's tests need, not whatever the
interpreter happens to have), no cache or bytecode written, and the project's ``addopts`` (coverage flags and
the like) cleared. The selected tests are passed in an args file (``@selected.txt``) because parametrised node
ids may hold spaces.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness_rl.envs.sources import repo_score
from harness_rl.envs.sources.repo_score import parse_report

__all__ = ["Outcome", "TestRunner", "parse_report", "run_pytest", "verifier_files", "write_tree"]

PYTEST_ARGS = ("-q", "-p", "no:cacheprovider", "-o", "addopts=", "--tb=no", "-rA")
PYTEST_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
#: Address-space cap for a test run, in KiB: a mutant that appends in an endless loop once took 16 GB of a
#: shared machine before its timeout; with the cap it dies of MemoryError at once.
MEMORY_LIMIT_KB = 4 * 1024 * 1024


@dataclass(frozen=True)
class Outcome:
    """What one pytest run gave.

    Attributes:
        status: "ok" (pytest ran and reported; failures included) or "timeout" or "broken" (no report, e.g.
            an import error stopped collection).
        passed: Node ids reported passed (a test with a failed subtest counts as failed, not passed).
        failed: Node ids reported failed or erroring.
    """

    status: str
    passed: frozenset[str]
    failed: frozenset[str]


def write_tree(dest: Path, files: Mapping[str, bytes | str]) -> None:
    """Write ``files`` (relative path -> content) under ``dest``."""
    for rel, content in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        path.write_bytes(content)


def run_pytest(files: Mapping[str, bytes | str], args: list[str], timeout_s: float, python: str) -> Outcome:
    """Lay ``files`` out in a fresh folder and run pytest there on ``args`` (paths or node ids)."""
    with tempfile.TemporaryDirectory(prefix="hrl-repo-run-") as tmp:
        run = Path(tmp)
        write_tree(run, files)
        (run / "selected.txt").write_text("".join(a + "\n" for a in args))
        env = {**os.environ, **PYTEST_ENV, "PYTHONPATH": f"{run / 'src'}{os.pathsep}{run}"}
        # ulimit through bash, not preexec_fn: preexec_fn is unsafe with the threads that run_many uses.
        cmd = ["bash", "-c", f'ulimit -v {MEMORY_LIMIT_KB} && exec "$@"', "bash"]
        cmd += [python, "-m", "pytest", *PYTEST_ARGS, "--rootdir", str(run), "@selected.txt"]
        try:
            proc = subprocess.run(cmd, cwd=run, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return Outcome("timeout", frozenset(), frozenset())
        known = [a for a in args if "::" in a]
        passed, failed = parse_report(proc.stdout, known)
        # Exit codes 0 and 1 are "tests ran"; 2+ is an interruption (collection error, usage error, no tests).
        status = "ok" if proc.returncode in (0, 1) else "broken"
        return Outcome(status, frozenset(passed), frozenset(failed))


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:32]


class TestRunner:
    """Runs a project's tests against its code or a mutant of it, many at once, remembering every result.

    Results are kept as JSON under ``cache_dir`` keyed by a digest of everything that decides them (the files,
    the selection, the interpreter's version, pytest's arguments), so a second build runs nothing.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, cache_dir: Path, python: str = sys.executable, jobs: int | None = None) -> None:
        self.cache_dir = Path(cache_dir)
        self.python = python
        self.jobs = jobs or os.cpu_count() or 1
        self.runs = 0

    def _cached(self, key: str, compute) -> Outcome:
        path = self.cache_dir / key[:2] / f"{key}.json"
        if path.is_file():
            d = json.loads(path.read_text())
            return Outcome(d["status"], frozenset(d["passed"]), frozenset(d["failed"]))
        outcome = compute()
        self.runs += 1
        # Timeouts are kept too (mutants that loop forever): retrying them made two builds on one machine
        # differ, and each retry costs the whole timeout.
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        record = {"status": outcome.status, "passed": sorted(outcome.passed), "failed": sorted(outcome.failed)}
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
        return outcome

    def run(self, files: Mapping[str, bytes | str], args: list[str], timeout_s: float = 120.0) -> Outcome:
        """Run pytest on ``args`` over ``files`` (cached)."""
        parts = [f"{sys.version_info[:3]}", " ".join(PYTEST_ARGS), *args]
        for rel in sorted(files):
            parts += [rel, files[rel]]
        key = _digest(*parts)
        return self._cached(key, lambda: run_pytest(files, args, timeout_s, self.python))

    def run_many(self, jobs: list[tuple[Mapping[str, bytes | str], list[str], float]]) -> list[Outcome]:
        """``run`` for each (files, args, timeout) in parallel; results in the same order."""
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            return list(pool.map(lambda j: self.run(*j), jobs))


VERIFIER_SH = r"""#!/usr/bin/env bash
# Verifier: runs {n_selected} of the project's own tests (hidden in suite/) against the workspace's code.
# Reward 1.0 iff every selected test is reported passed (score.py reads pytest's per-test summary: the exit
# status alone is not trusted, since the agent's code runs inside pytest and can exit 0 early). Only the
# project's code folders are taken from the workspace, and any conftest.py in them is dropped, so files the
# agent adds cannot change how pytest runs.
set -u
WS="${{HRL_WORKSPACE:-/app}}"
TESTS="${{HRL_TESTS_DIR:-/tests}}"
LOGS="${{HRL_LOGS_DIR:-/logs/verifier}}"
PY="${{HRL_PYTHON:-python3}}"
mkdir -p "$LOGS"
RUN="$(mktemp -d)"
trap 'rm -rf "$RUN"' EXIT
for src in {sources}; do
  if [ -e "$WS/$src" ]; then
    mkdir -p "$RUN/$(dirname "$src")"
    cp -R "$WS/$src" "$RUN/$src"
  fi
done
find "$RUN" -name conftest.py -delete
cp -R "$TESTS/suite/." "$RUN/"
cp "$TESTS/selected.txt" "$RUN/selected.txt"
cd "$RUN"
ulimit -v {memory_kb} 2>/dev/null || true
status=0
{env} PYTHONPATH="$RUN/src:$RUN" timeout {timeout_s} "$PY" -m pytest {pytest_args} --rootdir "$RUN" @selected.txt \
    > "$LOGS/pytest.log" 2>&1 || status=$?
cd /
"$PY" -I "$TESTS/score.py" "$LOGS/pytest.log" "$TESTS/selected.txt" "$status" > "$LOGS/reward.json"
"""


def verifier_files(sources: Iterable[str], n_selected: int, timeout_s: int) -> dict[str, str]:
    """The verifier's files of a repository task: ``test.sh`` (the build-time pytest run, in bash) and
    ``score.py`` (``repo_score``, which turns pytest's per-test summary into the reward)."""
    import shlex

    test_sh = VERIFIER_SH.format(
        n_selected=n_selected,
        sources=" ".join(shlex.quote(s) for s in sources),
        env=" ".join(f"{k}={v}" for k, v in PYTEST_ENV.items()),
        timeout_s=int(timeout_s),
        memory_kb=MEMORY_LIMIT_KB,
        pytest_args=" ".join(shlex.quote(a) for a in PYTEST_ARGS),
    )
    return {"test.sh": test_sh, "score.py": Path(repo_score.__file__).read_text()}
