"""A slow group pinned to an old adapter version never crashes the run, and rollouts never pile up far ahead.

The trainer publishes a version per step into a harness's ``max_staleness + 2`` adapter slots. A group that
started several versions ago still pins its version after the trainer retired it; today the next publishes would
fill the slots and raise. Such a group would be dropped by the trainer anyway, so the worker cancels it: its
harness processes are stopped, it is never queued, and its version unloads.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from harness_rl.engine.adapters import AdapterRegistry
from harness_rl.envs.smoke import smoke_task
from harness_rl.harnesses.base import HarnessOutcome
from harness_rl.proxy.graph import RolloutGraph
from harness_rl.rollout.session import RolloutSettings
from harness_rl.rollout.worker import RolloutWorker, TaskSampler, pending_groups_bound
from harness_rl.sandbox.base import SandboxLayout
from harness_rl.sandbox.local import LocalSandbox

SETTINGS = RolloutSettings(
    step_limit=3, max_requests=4, timeout_s=120, verifier_timeout_s=10, temperature=0.8, max_tokens=64
)
MAX_STALENESS = 3


def processes_under(folder: Path) -> list[psutil.Process]:
    """What the test watches: processes whose HOME lies inside ``folder`` (every sandboxed run's HOME is in its
    rollout folder)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            home = proc.environ().get("HOME")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        if home and Path(home).resolve().is_relative_to(Path(folder).resolve()):
            found.append(proc)
    return found


class RecordingEngine:
    """Test double of the engine's LoRA admin endpoints."""

    def __init__(self):
        self.loaded: set[str] = set()
        self.calls: list[tuple[str, str]] = []

    def load_adapter(self, name, path):
        self.calls.append(("load", name))
        self.loaded.add(name)

    def unload_adapter(self, name):
        self.calls.append(("unload", name))
        self.loaded.remove(name)


class FakeProxy:
    """Test double of ProxyAdmin: every session ends with a one-call trace."""

    url = "http://127.0.0.1:9"

    def __init__(self):
        self._keys = itertools.count()
        self.open: set[str] = set()
        self.lock = threading.Lock()

    def create_session(self, **kwargs):
        with self.lock:
            key = f"k{next(self._keys)}"
            self.open.add(key)
            return key

    def end_session(self, key):
        with self.lock:
            self.open.remove(key)
        graph = RolloutGraph()
        graph.add(
            prompt_token_ids=[1, 2],
            completion_token_ids=[3, 4],
            completion_logprobs=[-0.5, -0.25],
            finish_reason="stop",
            dialect="openai_chat",
            model="m",
            t_start=0.0,
            t_end=0.0,
        )
        nodes = [n.to_json() for n in graph.nodes]
        return {"requests": 1, "nodes": nodes, "sequences": graph.sequences(), "failures": [], "events": []}


class SlowFirstGroupHarness:
    """The first group's rollouts run a real long process in the local sandbox; later groups end at once."""

    name = "pi"
    dialect = "openai_chat"
    step_limit_is_hard = True

    def __init__(self):
        self.sandbox = LocalSandbox(use_bwrap=False, address_space_bytes=None, kill_grace_s=1.0)
        self.slow_started = threading.Semaphore(0)
        self.pending_seen: list[int] = []
        self.worker: RolloutWorker | None = None
        self.runs = 0
        self.lock = threading.Lock()

    def run(self, task_workspace, instruction, *, base_url, api_key, step_limit, timeout_s, rollout_dir):
        with self.lock:
            self.runs += 1
            if self.worker is not None:
                self.pending_seen.append(self.worker.pending_groups)
        if Path(rollout_dir).parent.name != "g00000":
            return HarnessOutcome("submitted", 0, 1, "ok", None, 0.0, False)
        layout = SandboxLayout.for_rollout(Path(rollout_dir), workspace=Path(task_workspace))
        self.slow_started.release()
        result = self.sandbox.run(["sleep", "300"], layout, env={"PATH": os.environ["PATH"]}, timeout_s=timeout_s)
        return HarnessOutcome("error", result.returncode, 0, "", "stopped", result.seconds, result.timed_out)


def _worker(tmp_path, harness, registry, *, max_sessions=2, max_pending_groups=1):
    worker = RolloutWorker(
        harness=harness,
        sampler=TaskSampler([smoke_task("t", "out.txt", "x")], seed=0),
        proxy=FakeProxy(),
        registry=registry,
        settings=SETTINGS,
        num_generations=2,
        max_sessions=max_sessions,
        run_dir=tmp_path / "run",
        max_pending_groups=max_pending_groups,
    )
    harness.worker = worker
    return worker


def _wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _publish(registry: AdapterRegistry, worker: RolloutWorker | None, version: int, path: Path) -> None:
    """What the trainer does after each optimizer step (PolicyTrainer.publish, then the loop's cancel_stale)."""
    registry.publish("pi", version, path)
    registry.retire_older_than("pi", version - MAX_STALENESS)
    if worker is not None:
        worker.cancel_stale(version - MAX_STALENESS)


@pytest.mark.parametrize("trainer_cancels", [True, False], ids=["after-publish", "registry-evicts"])
def test_slow_group_pinned_five_versions_back_is_cancelled(tmp_path, trainer_cancels):
    engine = RecordingEngine()
    registry = AdapterRegistry(engine, max_live_versions=MAX_STALENESS + 2, evict_wait_s=30)
    harness = SlowFirstGroupHarness()
    registry.publish("pi", 0, tmp_path / "v0")
    worker = _worker(tmp_path, harness, registry).start()
    slow_dir = tmp_path / "run" / "rollouts" / "pi" / "g00000"
    try:
        for _ in range(2):
            assert harness.slow_started.acquire(timeout=60)
        _wait_for(lambda: len(processes_under(slow_dir)) == 2, "the slow group's two harness processes")
        assert registry.uses("pi-v0") == 1
        for version in range(1, 7):  # v5 and v6 would not fit beside a pinned v0 (five slots)
            _publish(registry, worker if trainer_cancels else None, version, tmp_path / f"v{version}")
        assert worker.stale_groups_cancelled == 1
        assert registry.forced_unloads == 0  # the worker released the pin; nothing was pulled from under it
        assert registry.evictions == (0 if trainer_cancels else 1)
        assert ("unload", "pi-v0") in engine.calls and "pi-v0" not in engine.loaded
        assert registry.loaded() == [f"pi-v{v}" for v in range(3, 7)]
        _wait_for(lambda: not processes_under(slow_dir), "the slow group's harness processes to be stopped")
        # The next group starts on a current version; the cancelled one is never queued.
        group = worker.groups.get(timeout=60)
        assert group.group_id != 0 and group.policy_version >= 4
        assert not worker.errors
    finally:
        worker.request_stop()
        harness.sandbox.terminate_all()
        worker.join()
    assert all(g.group_id != 0 for g in list(worker.groups.queue))
    assert not worker.proxy.open  # the cancelled group's proxy sessions were ended too
    assert not worker.errors


def test_cancel_stale_leaves_current_groups_alone(tmp_path):
    registry = AdapterRegistry(RecordingEngine(), max_live_versions=MAX_STALENESS + 2)
    harness = SlowFirstGroupHarness()
    registry.publish("pi", 0, tmp_path / "v0")
    worker = _worker(tmp_path, harness, registry).start()
    try:
        assert harness.slow_started.acquire(timeout=60)
        assert worker.cancel_stale(0) == 0  # pinned to v0: not below v0
        assert worker.stale_groups_cancelled == 0 and registry.uses("pi-v0") == 1
    finally:
        worker.request_stop()
        harness.sandbox.terminate_all()
        worker.join()


def test_pending_groups_are_bounded(tmp_path):
    """Nobody takes groups: the worker fills the queue to the bound and launches nothing more until one is taken."""
    registry = AdapterRegistry(RecordingEngine(), max_live_versions=2)
    registry.publish("pi", 0, tmp_path / "v0")
    harness = SlowFirstGroupHarness()
    harness.run = _fast(harness)
    worker = _worker(tmp_path, harness, registry, max_sessions=4, max_pending_groups=3).start()
    try:
        _wait_for(lambda: worker.groups.qsize() == 3, "three queued groups")
        time.sleep(1.0)  # room for the worker to overshoot, which it must not
        assert worker.groups.qsize() == 3 and harness.runs == 3 * 2
        worker.groups.get(timeout=1)
        _wait_for(lambda: harness.runs == 4 * 2, "one more group after one was taken")
        _wait_for(lambda: worker.groups.qsize() == 3, "the queue back at its bound")
    finally:
        worker.request_stop()
        worker.join()
    # Every rollout started while fewer than three groups were pending besides its own group.
    assert harness.pending_seen and max(harness.pending_seen) <= 3
    assert not worker.errors


def _fast(harness: SlowFirstGroupHarness):
    def run(task_workspace, instruction, **kwargs):
        with harness.lock:
            harness.runs += 1
            harness.pending_seen.append(harness.worker.pending_groups)
        return HarnessOutcome("submitted", 0, 1, "ok", None, 0.0, False)

    return run


def test_default_bound():
    assert pending_groups_bound(max_staleness=4, tasks_per_step=6) == 24
    assert pending_groups_bound(max_staleness=0, tasks_per_step=6) == 6  # fully on-policy still keeps a step queued
    registry = AdapterRegistry(RecordingEngine(), max_live_versions=2)
    worker = RolloutWorker(
        harness=SlowFirstGroupHarness(),
        sampler=TaskSampler([smoke_task("t", "out.txt", "x")], seed=0),
        proxy=FakeProxy(),
        registry=registry,
        settings=SETTINGS,
        num_generations=8,
        max_sessions=48,
        run_dir=Path("/nonexistent"),
    )
    assert worker.max_pending_groups == 4 * 6
