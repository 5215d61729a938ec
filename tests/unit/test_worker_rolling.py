"""Session slots roll over between groups: a slot freed by a finished rollout is taken by the next group's
rollout while the current group's straggler still runs, and no more than ``max_sessions`` harnesses ever run."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from harness_rl.engine.adapters import AdapterRegistry
from harness_rl.envs.smoke import smoke_task
from harness_rl.harnesses.base import HarnessOutcome
from harness_rl.rollout.worker import RolloutWorker, TaskSampler
from tests.unit.test_worker_staleness import SETTINGS, FakeProxy, RecordingEngine


class StragglerHarness:
    """Group 0's rollout r0 blocks until released; every other rollout ends at once. Records concurrency."""

    name = "pi"
    dialect = "openai_chat"
    step_limit_is_hard = True

    def __init__(self):
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.max_running = 0
        self.started: list[str] = []  # "g<group>/r<i>" in start order

    def run(self, task_workspace, instruction, *, base_url, api_key, step_limit, timeout_s, rollout_dir):
        rollout = f"{Path(rollout_dir).parent.name}/{Path(rollout_dir).name}"
        with self.lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.started.append(rollout)
        try:
            if rollout == "g00000/r0":
                assert self.release.wait(30), "the test never released the straggler"
            else:
                time.sleep(0.05)
            return HarnessOutcome("submitted", 0, 1, "ok", None, 0.0, False)
        finally:
            with self.lock:
                self.running -= 1


def test_next_group_takes_freed_slots_while_a_straggler_runs(tmp_path):
    harness = StragglerHarness()
    worker = RolloutWorker(
        harness=harness,
        sampler=TaskSampler([smoke_task("t", "out.txt", "x")], seed=0),
        proxy=FakeProxy(),
        registry=AdapterRegistry(RecordingEngine(), max_live_versions=2),
        settings=SETTINGS,
        num_generations=2,
        max_sessions=2,
        run_dir=tmp_path / "run",
        max_pending_groups=8,
    )
    worker.registry.publish("pi", 0, tmp_path)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        # Group 0's r1 ends at once; its slot must go to group 1 while g00000/r0 still blocks.
        while not any(s.startswith("g00001/") for s in harness.started) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(s.startswith("g00001/") for s in harness.started), harness.started
        assert not harness.release.is_set()
        harness.release.set()
        first = worker.groups.get(timeout=30)
        assert first.group_id in (0, 1)
    finally:
        worker.request_stop()
        harness.release.set()
        worker.join(timeout_s=30)
    assert harness.max_running <= 2, f"{harness.max_running} harnesses ran at once with max_sessions=2"
