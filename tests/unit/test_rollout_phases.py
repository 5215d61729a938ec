"""Rollout phase timing: the proxy times its engine calls, the rollout splits its wall time into phases (sandbox
set-up, harness start-up, generation, tools, verifier), and a training step logs their means."""

from __future__ import annotations

import json
import os
import threading
import time

import openai
import pytest

from harness_rl.envs.smoke import smoke_task
from harness_rl.harnesses.base import HarnessOutcome
from harness_rl.proxy.sessions import SessionStore, engine_wait_s, union_seconds
from harness_rl.rollout.phases import PHASES, mean_phases, rollout_phases
from harness_rl.rollout.session import RolloutSettings, run_rollout
from harness_rl.testkit.fake_vllm import Reply
from tests.proxy_helpers import fake_engine_behind_proxy

ADMIN = "test-admin-token"
SETTINGS = RolloutSettings(
    step_limit=4, max_requests=6, timeout_s=30, verifier_timeout_s=10, temperature=0.8, max_tokens=64
)
TASK = smoke_task("t1", "out.txt", "apple")
STARTUP_S = 0.4
DELAY_S = 0.3
WORK_S = 0.25


class SlowHarness:
    """A test double of a harness with known costs: it "starts up" for ``STARTUP_S``, then makes ``calls`` model
    calls (``parallel`` of them at once), "running a tool" for ``WORK_S`` after each round."""

    name = "slow"
    dialect = "openai_chat"

    def __init__(self, calls: int = 2, parallel: int = 1) -> None:
        self.calls = calls
        self.parallel = parallel

    def run(self, task_workspace, instruction, *, base_url, api_key, step_limit, timeout_s, rollout_dir):
        started_at = time.time()
        time.sleep(STARTUP_S)
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        messages = [{"role": "user", "content": instruction}]
        for _ in range(self.calls):
            threads = [
                threading.Thread(target=client.chat.completions.create, kwargs={"model": "m", "messages": messages})
                for _ in range(self.parallel)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            time.sleep(WORK_S)
        (task_workspace / "out.txt").write_text("apple\n")
        outcome = HarnessOutcome("submitted", 0, self.calls, "", None, time.time() - started_at, False)
        outcome.started_at = started_at
        return outcome


@pytest.fixture(scope="module")
def stack():
    with fake_engine_behind_proxy(ADMIN) as stack:
        yield stack


def rollout(admin, harness, tmp_path):
    return run_rollout(
        task=TASK, harness=harness, proxy=admin, adapter=None, settings=SETTINGS, rollout_dir=tmp_path / "r"
    )


def test_phases_measure_startup_generation_and_tools(stack, tmp_path):
    engine, admin = stack
    engine.reset([Reply(text="echo apple > out.txt")] * 2, reply_delay_s=DELAY_S)
    result = rollout(admin, SlowHarness(calls=2), tmp_path)
    phases = result.phases
    assert result.score == 1.0 and set(phases) == set(PHASES)
    assert phases["harness_startup_s"] >= STARTUP_S
    assert phases["generation_s"] >= 2 * DELAY_S
    assert phases["tools_s"] >= 2 * WORK_S
    assert phases["verifier_s"] > 0 and phases["sandbox_setup_s"] >= 0
    parts = sum(phases[k] for k in PHASES if k != "total_s")
    assert parts <= phases["total_s"] + 0.01  # the phases partition the rollout (rounded to ms)
    assert result.summary()["phases"] == phases  # the rollouts.jsonl record carries them
    assert len(result.trace["engine_calls"]) == 2 and result.trace["first_request_t"] is not None


def test_overlapping_calls_count_once(stack, tmp_path):
    """Three calls in flight at once wait on the engine for about one delay, not three."""
    engine, admin = stack
    engine.reset(reply_delay_s=DELAY_S)
    result = rollout(admin, SlowHarness(calls=1, parallel=3), tmp_path)
    calls = sorted(result.trace["engine_calls"])
    assert len(calls) == 3
    # Not a timing bound (a loaded machine may stagger the calls): the phase is the union of the recorded
    # intervals, which is less than their sum whenever they overlap, as three calls sent at once do.
    assert calls[1][0] < calls[0][1], f"the harness's parallel calls did not overlap: {calls}"
    assert result.phases["generation_s"] >= DELAY_S
    assert result.phases["generation_s"] < sum(end - start for start, end in calls) - 1e-3


def test_union_seconds_merges_overlaps():
    assert union_seconds([]) == 0.0
    assert union_seconds([(0, 1), (0.5, 2), (3, 4)]) == pytest.approx(3.0)
    assert union_seconds([(0, 10), (2, 3)]) == pytest.approx(10.0)


def test_engine_wait_covers_streams_and_skips_budget_replies():
    """A stream's engine_call ends at its headers; its node's interval (and a broken stream's failure) covers the
    rest. A call answered by the request budget never reached the engine."""
    calls = [[0.0, 0.1]]
    nodes = [{"t_start": 0.0, "t_end": 2.0}, {"t_start": 5.0, "t_end": 5.0, "budget_exhausted": True}]
    failures = [{"t_start": 3.0, "t": 4.0, "kind": "client_disconnected"}, {"t": 9.0, "kind": "upstream_error"}]
    assert engine_wait_s(calls, nodes, failures) == pytest.approx(3.0)


def test_a_session_traces_its_first_request_and_open_calls():
    store = SessionStore()
    session = store.create(adapter=None, purpose="train")
    assert session.trace()["first_request_t"] is None and session.trace()["engine_wait_s"] == 0.0
    before = time.time()
    session.begin_request()
    with session.engine_call():
        time.sleep(0.05)
        trace = session.trace()  # a call still awaiting the engine counts up to now
    assert trace["first_request_t"] >= before and trace["engine_wait_s"] >= 0.05
    assert len(session.trace()["engine_calls"]) == 1


def test_rollout_phases_partition_the_marks():
    trace = {"first_request_t": 13.0, "engine_wait_s": 20.0}
    p = rollout_phases(start_t=10.0, launch_t=11.0, harness_end_t=40.0, trace=trace, verifier_s=1.5, end_t=42.0)
    assert (p.sandbox_setup_s, p.harness_startup_s, p.generation_s, p.tools_s) == (1.0, 2.0, 20.0, 7.0)
    assert (p.verifier_s, p.total_s) == (1.5, 32.0)
    # A harness that never called the model spent its run starting up; one that could not start has no run.
    silent = rollout_phases(start_t=0.0, launch_t=1.0, harness_end_t=5.0, trace={}, verifier_s=0.0, end_t=6.0)
    assert (silent.harness_startup_s, silent.generation_s, silent.tools_s) == (4.0, 0.0, 0.0)
    failed = rollout_phases(start_t=0.0, launch_t=None, harness_end_t=None, trace=None, verifier_s=0.0, end_t=1.0)
    assert (failed.sandbox_setup_s, failed.harness_startup_s, failed.total_s) == (0.0, 0.0, 1.0)


def test_mean_phases_over_a_steps_rollouts():
    rows = [dict.fromkeys(PHASES, 1.0), dict.fromkeys(PHASES, 3.0), None]
    means = mean_phases(rows)
    assert means["time/rollout_generation_s"] == 2.0 and len(means) == len(PHASES)
    assert mean_phases([None]) == {}


def test_the_benchmark_reads_a_runs_phases_and_rebuilds_old_records(tmp_path):
    """``benchmarks.rollout_phases --run``: records with phases are taken as they are; a rollout recorded before
    phase timing is rebuilt from its folder (launch = trace time minus the harness's seconds)."""
    from benchmarks.rollout_phases import run_phases, summarize

    old = tmp_path / "rollouts" / "r0"
    (old / "verifier").mkdir(parents=True)
    (old / "outcome.json").write_text('{"seconds": 10.0}')
    (old / "trace.jsonl").write_text('{"type":"session"}\n{"type":"node","t_start":103.0,"t_end":107.0}\n')
    (old / "verifier" / "output.log").write_text("")
    os.utime(old / "trace.jsonl", (110.0, 110.0))
    os.utime(old / "verifier" / "output.log", (110.5, 110.5))
    new = dict.fromkeys(PHASES, 2.0)
    (tmp_path / "rollouts.jsonl").write_text(
        json.dumps({"phases": new, "rollout_dir": "x"}) + "\n" + json.dumps({"rollout_dir": str(old)}) + "\n"
    )
    rows, rebuilt = run_phases(tmp_path)
    assert rebuilt == 1 and rows[0] == new
    assert rows[1]["harness_startup_s"] == pytest.approx(3.0) and rows[1]["generation_s"] == pytest.approx(4.0)
    assert rows[1]["tools_s"] == pytest.approx(3.0) and rows[1]["verifier_s"] == pytest.approx(0.5)
    assert summarize(rows)["generation_s"] == (pytest.approx(3.0), pytest.approx(3.0))
