"""Score a workspace after the harness exits, in a subprocess with a timeout.

A verifier that crashes, times out or prints no score makes the rollout unscorable (score None, with the
error); that is different from a wrong answer (0.0) and GRPO leaves such rollouts out of the group.

Verifier kinds (``Task.verifier["kind"]``):
    file_contains: ``{"path": P, "word": W}``; the built-in check ``harness_rl.envs.checks``.
    command: ``{"argv": [...]}``; any program run in the workspace; its last stdout line is the score,
        either a number or JSON ``{"score": x}``, and it must exit 0.
Both take an optional ``"timeout_s"`` (default ``DEFAULT_TIMEOUT_S``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness_rl.envs.task import Task

DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class VerifierResult:
    """A verifier's verdict.

    Attributes:
        score: In [0, 1] (1 = solved); None when the verifier itself failed.
        error: Why the verifier failed (None when it produced a score).
        seconds: How long it ran.
    """

    score: float | None
    error: str | None = None
    seconds: float = 0.0

    @property
    def scorable(self) -> bool:
        """Whether the rollout has a score at all."""
        return self.score is not None


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


def verify(task: Task, workspace: Path, *, timeout_s: float | None = None) -> VerifierResult:
    """Run the task's verifier on ``workspace``; called by the rollout worker after the harness exits.

    Args:
        task: The task (its ``verifier`` spec).
        workspace: The rollout's workspace.
        timeout_s: Overrides the spec's ``timeout_s``.

    Returns:
        The score, or None with the error when the verifier crashed, timed out or printed no score.
    """
    argv = verifier_argv(task)
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
        score = _parse_score(out.decode(errors="replace"))
    except ValueError as e:
        return VerifierResult(None, f"{e}; stderr: {stderr_tail}", seconds)
    return VerifierResult(score, None, seconds)


def _parse_score(stdout: str) -> float:
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
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"verifier's score is not a finite number: {last[:200]!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"verifier's score {value} is outside [0, 1]")
    return float(value)
