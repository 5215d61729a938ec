"""Validate task folders: each reads back, its oracle solves it (reward 1.0) and an empty attempt does not.

Tasks run in parallel (each is two sandboxed script runs plus a verifier run, mostly waiting on processes,
so a thread pool sized to the cores keeps them busy). Tasks that need a container are listed and skipped:
the local sandbox cannot run them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from harness_rl.envs.splits import SplitLeakError, check_splits_disjoint
from harness_rl.envs.task import Task
from harness_rl.envs.taskdir import TASK_TOML, TaskFormatError, read_task_dir
from harness_rl.envs.testrun import run_empty_attempt, run_oracle
from harness_rl.sandbox.base import Sandbox, hide_from_sandboxes


@dataclass
class TaskCheck:
    """One task's validation.

    Attributes:
        task_id: The folder name.
        oracle_score: The verifier's reward after the oracle (None: it or the oracle failed).
        empty_score: The verifier's reward on the untouched workspace (None: the verifier failed).
        problems: Why the task is invalid (empty when valid).
    """

    task_id: str
    oracle_score: float | None = None
    empty_score: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems


@dataclass
class ValidationReport:
    """All tasks of a folder: checked, skipped (need a container) and format errors."""

    checks: list[TaskCheck]
    skipped: list[str]
    leaks: str | None = None

    @property
    def oracle_pass(self) -> float:
        """Share of checked tasks whose oracle got reward 1.0."""
        return _share(c.oracle_score == 1.0 for c in self.checks)

    @property
    def empty_pass(self) -> float:
        """Share of checked tasks whose empty attempt got reward 1.0 (a valid task set has 0)."""
        return _share(c.empty_score == 1.0 for c in self.checks)

    @property
    def invalid(self) -> list[TaskCheck]:
        return [c for c in self.checks if not c.valid]

    def summary_line(self) -> str:
        """``tasks=N oracle_pass=R empty_pass=R``."""
        return f"tasks={len(self.checks)} oracle_pass={self.oracle_pass:.4f} empty_pass={self.empty_pass:.4f}"


def _share(flags) -> float:
    flags = list(flags)
    return sum(flags) / len(flags) if flags else 0.0


def check_task(task: Task, work_root: Path, sandbox: Sandbox | None = None) -> TaskCheck:
    """Run the oracle and the empty attempt of one task in fresh folders under ``work_root``."""
    check = TaskCheck(task.id)
    work = Path(tempfile.mkdtemp(prefix=f"{task.id}.", dir=work_root))
    try:
        oracle = run_oracle(task, work / "oracle", sandbox=sandbox)
        if oracle.error is not None:
            check.problems.append(f"oracle failed: {oracle.error}")
        elif oracle.verdict is not None:
            check.oracle_score = oracle.verdict.score
            if oracle.verdict.score is None:
                check.problems.append(f"verifier failed after the oracle: {oracle.verdict.error}")
            elif oracle.verdict.score != 1.0:
                check.problems.append(f"oracle got reward {oracle.verdict.score}, not 1.0")
        empty = run_empty_attempt(task, work / "empty", sandbox=sandbox)
        check.empty_score = empty.score
        if empty.score is None:
            check.problems.append(f"verifier failed on the empty attempt: {empty.error}")
        elif empty.score >= 1.0:
            check.problems.append("the empty attempt passes (reward 1.0)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return check


def validate_dir(
    root: Path,
    *,
    workers: int | None = None,
    sandbox: Sandbox | None = None,
    on_done: Callable[[TaskCheck], None] | None = None,
) -> ValidationReport:
    """Validate every task folder under ``root`` (see the module docstring).

    Args:
        root: A folder of task folders.
        workers: Tasks in flight (default: the number of cores).
        sandbox: Where scripts run (default: a local sandbox per run).
        on_done: Called with each finished check (progress bars).
    """
    root = Path(root).resolve()
    hide_from_sandboxes(root)
    checks: list[TaskCheck] = []
    tasks: list[Task] = []
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not (child / TASK_TOML).is_file():
            continue
        try:
            tasks.append(read_task_dir(child, hide=False))
        except TaskFormatError as err:
            checks.append(TaskCheck(child.name, problems=[f"format: {err}"]))
            if on_done:
                on_done(checks[-1])
    skipped = [t.id for t in tasks if t.needs_container]
    runnable = [t for t in tasks if not t.needs_container]
    leaks = None
    try:
        check_splits_disjoint(tasks)
    except SplitLeakError as err:
        leaks = str(err)
    with tempfile.TemporaryDirectory(prefix="hrl-validate-") as work_root:

        def one(task: Task) -> TaskCheck:
            check = check_task(task, Path(work_root), sandbox)
            if on_done:
                on_done(check)
            return check

        with ThreadPoolExecutor(workers or os.cpu_count() or 1, thread_name_prefix="validate") as pool:
            checks += list(pool.map(one, runnable))
    checks.sort(key=lambda c: c.task_id)
    return ValidationReport(checks, skipped, leaks)
