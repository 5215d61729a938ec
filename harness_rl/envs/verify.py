"""Score a workspace after the harness exits.

A verifier that crashes, times out or gives no score makes the rollout unscorable (score None, with the
error); that is different from a wrong answer (0.0) and GRPO leaves such rollouts out of the group.

Verifier kinds (``Task.verifier["kind"]``):
    tests: a task folder's ``tests/test.sh``, run in the sandbox by ``harness_rl.envs.testrun`` (the Harbor
        contract of ``harness_rl.envs.spec``; the usual kind).
    file_contains: ``{"path": P, "word": W}``; the built-in check ``harness_rl.envs.checks``.
    command: ``{"argv": [...]}``; any program run in the workspace; its last stdout line is the score,
        either a number or JSON ``{"score": x}``, and it must exit 0.
Both take an optional ``"timeout_s"`` (default ``DEFAULT_TIMEOUT_S``); they run as plain subprocesses (built-in
in-memory tasks for plumbing tests).

Whatever the kind, links that lead out of the workspace are deleted first (``harness_rl.envs.links``), so a
link to where the verifier keeps its expected files cannot make the output match itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness_rl.envs.links import remove_escaping_links
from harness_rl.envs.task import TESTS_VERIFIER, Task
from harness_rl.envs.testrun import run_tests
from harness_rl.envs.verdict import VerifierResult, check_score

if TYPE_CHECKING:
    from harness_rl.sandbox.base import Sandbox

DEFAULT_TIMEOUT_S = 30.0


def verifier_argv(task: Task) -> list[str]:
    """The command that verifies ``task`` (run with the workspace as cwd)."""
    spec = task.verifier
    kind = spec.get("kind")
    if kind == "file_contains":
        checks = [sys.executable, "-m", "harness_rl.envs.checks", "file_contains"]
        return [*checks, "--path", str(spec["path"]), "--word", str(spec["word"])]
    if kind == "command":
        return [str(a) for a in spec["argv"]]
    raise ValueError(f"task {task.id}: unknown verifier kind {kind!r}")


def verify(
    task: Task,
    workspace: Path,
    *,
    timeout_s: float | None = None,
    sandbox: Sandbox | None = None,
    rollout_dir: Path | None = None,
    tool_calls: int | None = None,
) -> VerifierResult:
    """Run the task's verifier on ``workspace``; called by the rollout worker after the harness exits.

    Args:
        task: The task (its ``verifier`` spec, or its folder's tests/).
        workspace: The rollout's workspace.
        timeout_s: Overrides the task's own limit.
        sandbox: Where a task folder's test.sh runs (default: a fresh ``LocalSandbox``, bwrap when usable).
        rollout_dir: The rollout's folder; the tests are copied to ``rollout_dir/verifier/`` (default: a
            temporary folder, removed afterwards).
        tool_calls: The rollout's tool calls, for test.sh as ``HRL_TOOL_CALLS`` (tasks with a tool-call budget).

    Returns:
        The score, or None with the error when the verifier crashed, timed out or gave no score.
    """
    if task.verifier.get("kind") == TESTS_VERIFIER or (task.task_dir is not None and not task.verifier):
        limit = timeout_s if timeout_s is not None else task.verifier_timeout_s
        return run_tests(task, workspace, rollout_dir=rollout_dir, sandbox=sandbox, timeout_s=limit,
                         tool_calls=tool_calls)  # fmt: skip
    argv = verifier_argv(task)
    remove_escaping_links(workspace)
    limit = timeout_s if timeout_s is not None else float(task.verifier.get("timeout_s", DEFAULT_TIMEOUT_S))
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=workspace,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # so a timeout kills the verifier's children too
        )
    except OSError as e:
        return VerifierResult(None, f"verifier could not start: {e}", time.monotonic() - start)
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return VerifierResult(None, f"verifier timed out after {limit:g} s", time.monotonic() - start)
    seconds = time.monotonic() - start
    stderr_tail = err.decode(errors="replace")[-1500:]
    if proc.returncode != 0:
        return VerifierResult(None, f"verifier exited {proc.returncode}: {stderr_tail}", seconds)
    try:
        score = parse_score_line(out.decode(errors="replace"))
    except ValueError as e:
        return VerifierResult(None, f"{e}; stderr: {stderr_tail}", seconds)
    return VerifierResult(score, None, seconds)


def parse_score_line(stdout: str) -> float:
    """The score on the last non-empty line of ``stdout``: a number or ``{"score": x}``, in [0, 1].

    Raises:
        ValueError: There is none, or it is not a finite number in [0, 1].
    """
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("verifier printed no score")
    last = lines[-1]
    try:
        value = json.loads(last)
    except json.JSONDecodeError as e:
        raise ValueError(f"verifier's last line is not a score: {last[:200]!r}") from e
    if isinstance(value, dict):
        value = value.get("score")
    return check_score(value, last)
