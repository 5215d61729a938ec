"""One rollout: a harness session on one task through the capture proxy, traced and verified.

Order matters: the session is registered before the harness starts (its key is the harness's API key), the
trace is taken after the harness exits (the proxy has then seen every call), and the verifier runs last, on the
workspace the harness left.

A rollout is scored as the attempt it was however the agent's run ended: submitted, stopped by its own limits,
killed at the wall-clock limit, out of context, or stopped by the request budget (the verifier gives 0 when
nothing was solved). Dropping those would bias each group towards short, easy attempts. Only an infrastructure
fault marks a rollout unscorable, with the reason (it never becomes a reward of 0 that would poison its group's
advantages): a harness that cannot start, no trace, an engine that failed or could not be reached, a call that
could not be captured, a verifier or sandbox that failed.

A harness killed at the wall-clock limit leaves nothing running that could still change the workspace: the sandbox
kills the run's whole process group, every descendant and every process carrying the run's marker before
``harness.run`` returns (sandbox/local.py ``run``; the docker sandbox kills the container), so the verifier sees
the workspace as the agent left it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness_rl.envs.task import Task, lay_out_workspace
from harness_rl.envs.verify import verify
from harness_rl.harnesses.base import Harness, HarnessOutcome
from harness_rl.proxy.export import write_trace_jsonl
from harness_rl.rollout.phases import rollout_phases
from harness_rl.rollout.proxy_admin import ProxyAdmin

log = logging.getLogger(__name__)

#: Why a rollout's run ended: the harness's own ``exit_kind`` (submitted, limits_exceeded, format_error, error,
#: no_output), or what stopped it from outside: ``timeout`` (killed at the wall-clock limit), ``context_exhausted``
#: (its prompt outgrew the model's context and the proxy's reply ended it), ``request_budget`` (the proxy answered
#: its calls past the budget), ``harness_failed`` (it could not start).
EndReason = Literal[
    "submitted", "limits_exceeded", "format_error", "error", "no_output",
    "timeout", "context_exhausted", "request_budget", "harness_failed",
]  # fmt: skip

#: Proxy failure kinds that are part of the attempt when the harness was killed at the wall-clock limit: the kill
#: closes the stream the harness was reading. Every other failure kind is an infrastructure fault.
_KILL_FAILURES = frozenset({"client_disconnected"})


@dataclass
class RolloutSettings:
    """Per-session limits and sampling policy, from the ``budget`` and ``trainer`` config groups."""

    step_limit: int
    max_requests: int
    timeout_s: float
    verifier_timeout_s: float
    #: None leaves the harness's own temperature (evaluation sessions).
    temperature: float | None
    max_tokens: int
    purpose: str = "train"
    #: Register each session with the proxy's safety gate (workspace, protected paths, text-action regex).
    safety: bool = False
    #: Reward subtracted per blocked tool call (``safety.block_penalty``).
    block_penalty: float = 0.0
    #: Largest efficiency bonus of a correct rollout (``tasks.efficiency_bonus``).
    efficiency_bonus: float = 0.1


@dataclass
class RolloutResult:
    """What one rollout produced.

    Attributes:
        task_id: The task.
        adapter: Engine-side adapter name the session was pinned to (None: base model).
        outcome: How the harness run ended (None when it could not start).
        trace: The session's rollout graph and training sequences from the proxy.
        score: Verifier score in [0, 1]; None when unscorable.
        unscorable: Why the rollout cannot be scored (None when it can).
        tool_calls: Actions the model took, counted from the captured graph.
        reward: Set by the group once all rollouts are scored.
        rollout_dir: Folder with the workspace, harness logs and trace.
        end_reason: Why the run ended (see ``EndReason``).
    """

    task_id: str
    adapter: str | None
    outcome: HarnessOutcome | None
    trace: dict[str, Any] | None
    score: float | None
    unscorable: str | None
    tool_calls: int
    rollout_dir: Path
    seconds: float
    reward: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: Tool calls the proxy's safety gate blocked (call id, tool, rule, explanation), from the trace.
    blocked: list[dict[str, Any]] = field(default_factory=list)
    #: The reward by component (correctness, efficiency, block_penalty, total); set with ``reward``.
    reward_parts: dict[str, float] | None = None
    end_reason: EndReason | None = None
    #: Seconds by phase (sandbox_setup_s, harness_startup_s, generation_s, tools_s, verifier_s, total_s; see
    #: rollout/phases.py).
    phases: dict[str, float] | None = None

    def summary(self) -> dict[str, Any]:
        """A compact JSON record for ``rollouts.jsonl``."""
        trace = self.trace or {}
        return {
            "task_id": self.task_id,
            "adapter": self.adapter,
            "exit_kind": self.outcome.exit_kind if self.outcome else None,
            "end_reason": self.end_reason,
            "score": self.score,
            "reward": self.reward,
            "reward_parts": self.reward_parts,
            "unscorable": self.unscorable,
            "tool_calls": self.tool_calls,
            "blocked": [b.get("rule") for b in self.blocked],
            "requests": trace.get("requests"),
            "sequences": len(trace.get("sequences", [])),
            "seconds": round(self.seconds, 3),
            "phases": self.phases,
            "rollout_dir": str(self.rollout_dir),
        }


def count_tool_calls(trace: dict[str, Any]) -> int:
    """Actions the model took: structured tool calls where the dialect has them, else one per engine call.

    In text mode (mini-swe-agent's ```bash blocks) every engine reply is one action; calls answered by the
    request budget are not the model's and do not count.
    """
    nodes = [n for n in trace.get("nodes", []) if not n.get("budget_exhausted")]
    structured = sum(len(n.get("tool_calls") or []) for n in nodes)
    return structured if structured else len(nodes)


def end_reason(outcome: HarnessOutcome | None, trace: dict[str, Any] | None) -> EndReason | None:
    """Why the run ended: the wall-clock kill first (nothing after it is the agent's), else the proxy's own final
    reply when the session's last call got one (context exhausted, request budget), else the harness's exit kind.

    The last call decides, not any earlier one: a harness that compacted its history after a full-context reply and
    went on to submit ended by submitting.
    """
    if outcome is not None and outcome.timed_out:
        return "timeout"
    trace = trace or {}
    calls = [(n["t_start"], "request_budget" if n.get("budget_exhausted") else "model") for n in trace.get("nodes", [])]
    calls += [(e["t"], "context_exhausted") for e in trace.get("events", []) if e.get("kind") == "context_exhausted"]
    last = max(calls)[1] if calls else "model"
    if last != "model":
        return last
    return outcome.exit_kind if outcome is not None else "harness_failed"


def infrastructure_faults(trace: dict[str, Any], *, timed_out: bool) -> list[dict[str, Any]]:
    """The proxy failures that are faults of the infrastructure rather than part of the attempt.

    Engine refusals over the context length never show up here (the proxy records them as events), nor do calls
    the request budget answered. A stream the harness stopped reading because it was killed at the wall-clock
    limit is part of a timed-out attempt; anything else the proxy could not serve or capture (engine 5xx or other
    refusal, unreachable engine, stream or JSON errors, missing or bad token ids) is a fault.
    """
    failures = trace.get("failures") or []
    return [f for f in failures if not (timed_out and f.get("kind") in _KILL_FAILURES)]


def request_budget(harness: Harness, settings: RolloutSettings) -> int:
    """The proxy's request budget for one session of ``harness``.

    A harness whose own step limit is hard stops itself at ``step_limit`` calls, so the budget is only a
    safety net a little above it (``settings.max_requests``). One whose limit is soft or absent (opencode,
    codex) is stopped by the proxy: its budget is the step limit itself. A harness that does not declare
    ``step_limit_is_hard`` is treated as soft, which can only make its run shorter, never unbounded.
    """
    if getattr(harness, "step_limit_is_hard", False):
        return settings.max_requests
    return settings.step_limit


def safety_spec(task: Task, harness: Harness, rollout_dir: Path) -> dict[str, Any]:
    """What the proxy's safety gate needs to know about this rollout (see proxy/admin.py ``safety``)."""
    return {
        "workspace": str((rollout_dir / "workspace").resolve()),
        "harness": harness.name,
        "protected_paths": list(task.protected_paths),
        "home": str((rollout_dir / "home").resolve()),
        "text_action": getattr(harness, "text_action_regex", None),
    }


def write_json_atomically(path: Path, payload: Any) -> None:
    """Write JSON to a temp file beside ``path`` and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_rollout(
    *,
    task: Task,
    harness: Harness,
    proxy: ProxyAdmin,
    adapter: str | None,
    settings: RolloutSettings,
    rollout_dir: Path,
) -> RolloutResult:
    """Run ``harness`` on ``task`` through the proxy and score it. Never raises for a failed rollout."""
    start = time.monotonic()
    start_t = time.time()  # phases are on the wall clock the proxy stamps its calls with
    harness_end_t: float | None = None
    rollout_dir.mkdir(parents=True, exist_ok=True)
    workspace = rollout_dir / "workspace"
    outcome: HarnessOutcome | None = None
    trace: dict[str, Any] | None = None
    unscorable: str | None = None
    key = proxy.create_session(
        adapter=adapter,
        purpose=settings.purpose,
        max_requests=request_budget(harness, settings),
        # Training pins top_p to 1.0 (the proxy enforces it too); an evaluation session keeps the harness's own.
        sampling={
            "temperature": settings.temperature,
            "max_tokens": settings.max_tokens,
            "top_p": 1.0 if settings.purpose == "train" else None,
        },
        safety=safety_spec(task, harness, rollout_dir) if settings.safety else None,
    )
    try:
        lay_out_workspace(task, workspace)
        outcome = harness.run(
            workspace,
            task.instruction,
            base_url=f"{proxy.url}/v1",
            api_key=key,
            step_limit=settings.step_limit,
            timeout_s=settings.timeout_s,
            rollout_dir=rollout_dir,
        )
        harness_end_t = time.time()
    except Exception as err:  # a harness that cannot start is this rollout's failure, not the run's
        log.warning("rollout %s on %s failed to run: %s", rollout_dir.name, task.id, err)
        unscorable = f"harness failed: {err}"
    finally:
        try:
            trace = proxy.end_session(key)
        except Exception as err:
            unscorable = unscorable or f"trace unavailable: {err}"
    if trace is not None:
        write_trace_jsonl(rollout_dir / "trace.jsonl", trace)
    if outcome is not None:
        write_json_atomically(rollout_dir / "outcome.json", outcome.to_dict())
    timed_out = outcome is not None and outcome.timed_out
    faults = infrastructure_faults(trace, timed_out=timed_out) if trace is not None else []
    if unscorable is None and faults:
        unscorable = f"proxy recorded {len(faults)} failed call(s): {faults[0]}"
    if unscorable is None and timed_out and trace is not None and trace.get("awaiting_engine"):
        # The clock ran out while the engine had not answered (a hung or stalled engine): the engine's fault, not
        # an attempt that took too long.
        unscorable = f"harness killed at the {settings.timeout_s:g} s wall-clock limit while waiting for the engine"
    if unscorable is None and trace is not None and not trace.get("sequences"):
        unscorable = "no training sequence captured (" + (
            "the first prompt alone exceeded the model's context)"
            if any(e.get("kind") == "context_exhausted" for e in trace.get("events") or [])
            else "the harness made no engine call)"
        )
    score = None
    verifier_s = 0.0
    if unscorable is None:
        verifier_start = time.monotonic()
        # A task's own verifier limit wins over the run's default (its author knows how long its tests take).
        result = verify(
            task,
            workspace,
            timeout_s=task.verifier_timeout_s or settings.verifier_timeout_s,
            sandbox=getattr(harness, "sandbox", None),
            rollout_dir=rollout_dir,
            tool_calls=count_tool_calls(trace) if trace else None,
        )
        verifier_s = time.monotonic() - verifier_start
        if result.score is None:
            unscorable = f"verifier failed: {result.error}"
        score = result.score
    return RolloutResult(
        task_id=task.id,
        adapter=adapter,
        outcome=outcome,
        trace=trace,
        score=score,
        unscorable=unscorable,
        tool_calls=count_tool_calls(trace) if trace else 0,
        blocked=[block for node in (trace or {}).get("nodes", []) for block in node.get("blocked") or []],
        rollout_dir=rollout_dir,
        seconds=time.monotonic() - start,
        end_reason=end_reason(outcome, trace),
        phases=rollout_phases(
            start_t=start_t,
            launch_t=harness_launch_t(outcome, harness_end_t),
            harness_end_t=harness_end_t,
            trace=trace,
            verifier_s=verifier_s,
            end_t=time.time(),
        ).to_json(),
    )


def harness_launch_t(outcome: HarnessOutcome | None, harness_end_t: float | None) -> float | None:
    """When the harness process was launched: its own ``started_at``, else its end minus its run's seconds."""
    if outcome is None or harness_end_t is None:
        return None
    if outcome.started_at is not None:
        return outcome.started_at
    return harness_end_t - outcome.seconds if outcome.seconds > 0 else None
