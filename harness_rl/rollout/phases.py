"""Where a rollout's wall time went: sandbox set-up, harness start-up, generation, tools, verifier.

A rollout (rollout/session.py ``run_rollout``) is timed at a few points on the wall clock (``time.time()``, the
clock the proxy stamps its calls with, so both sides line up):

    start ── sandbox_setup ── launch ── harness_startup ── first call ── generation + tools ── harness end
          ── (trace, outcome) ── verifier ── end

- ``sandbox_setup_s``: session registration, the workspace and sandbox folders, up to the harness process launch.
- ``harness_startup_s``: from the launch to the first call reaching the proxy (interpreter, imports, config; in
  a sandbox also bwrap and prlimit). A harness that never called the model spent its whole run starting up.
- ``generation_s``: the time the proxy waited on the engine for this session (the union of its calls, see
  proxy/sessions.py ``engine_wait_s``): what a faster or less busy engine would cut.
- ``tools_s``: the rest of the harness's run: its own work between calls (running commands, parsing, its
  retries) and its exit.
- ``verifier_s``: the verifier, from start to score.
- ``total_s``: the whole rollout; what the phases above leave (ending the session, writing the trace) is in it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

#: The phase keys of a rollout record, in pipeline order (``total_s`` last).
PHASES = ("sandbox_setup_s", "harness_startup_s", "generation_s", "tools_s", "verifier_s", "total_s")


@dataclass(frozen=True)
class RolloutPhases:
    """Seconds of one rollout by phase (see the module docstring for what each covers)."""

    sandbox_setup_s: float
    harness_startup_s: float
    generation_s: float
    tools_s: float
    verifier_s: float
    total_s: float

    def to_json(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in asdict(self).items()}


def rollout_phases(
    *,
    start_t: float,
    launch_t: float | None,
    harness_end_t: float | None,
    trace: Mapping[str, Any] | None,
    verifier_s: float,
    end_t: float,
) -> RolloutPhases:
    """The phases of one rollout from its wall-clock marks and the proxy's trace.

    Args:
        start_t: When the rollout began.
        launch_t: When the harness process was launched (None: it never was; everything before the harness's end
            is set-up).
        harness_end_t: When the harness run returned (None: it raised; the launch is taken as its end).
        trace: The proxy's trace (``first_request_t``, ``engine_wait_s``); None when it was unavailable.
        verifier_s: Seconds the verifier ran (0 when it did not).
        end_t: When the rollout ended.
    """
    trace = trace or {}
    harness_end = harness_end_t if harness_end_t is not None else (launch_t if launch_t is not None else start_t)
    launch = min(max(launch_t if launch_t is not None else harness_end, start_t), harness_end)
    harness_s = harness_end - launch
    first = trace.get("first_request_t")
    # Clamped into the harness's run: the clocks are the same, but a harness that never called has no first call.
    startup = harness_s if first is None else min(max(first - launch, 0.0), harness_s)
    generation = min(float(trace.get("engine_wait_s") or 0.0), harness_s - startup)
    return RolloutPhases(
        sandbox_setup_s=launch - start_t,
        harness_startup_s=startup,
        generation_s=generation,
        tools_s=max(harness_s - startup - generation, 0.0),
        verifier_s=verifier_s,
        total_s=end_t - start_t,
    )


def mean_phases(records: Iterable[Mapping[str, float] | None], prefix: str = "time/rollout_") -> dict[str, float]:
    """Per-phase means over rollouts' phase records, keyed ``<prefix><phase>`` (``time/rollout_generation_s``).

    Records that are None (a rollout without timing) are left out; no record at all gives {}.
    """
    rows = [r for r in records if r]
    if not rows:
        return {}
    return {f"{prefix}{k}": statistics.fmean(float(r[k]) for r in rows) for k in PHASES if all(k in r for r in rows)}
