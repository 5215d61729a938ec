"""The rollout worker: keeps harness sessions in flight and turns finished GRPO groups into training samples.

It runs in background threads next to the trainer, so sampling never waits for an optimizer step (the
"asynchronous" of async GRPO). Each group is pinned to the adapter version that was live when it started; the
trainer drops groups that fell more than ``max_staleness`` versions behind by the time it trains on them.

Two limits keep that asynchrony bounded. The worker launches no group while ``max_pending_groups`` groups are
queued or in flight, so rollouts cannot pile up far ahead of the trainer. And a group still running on a version
the trainer will never use is cancelled (``cancel_stale``, called after each publish and by the adapter registry
when a harness's adapter slots are full): its harness processes are stopped, it is discarded, and its pin is
released so the old version unloads, instead of one slow group filling the engine's adapter slots.
"""

from __future__ import annotations

import itertools
import logging
import queue
import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_rl.engine.adapters import AdapterRegistry
from harness_rl.envs.spec import DIFFICULTIES
from harness_rl.envs.task import Task
from harness_rl.harnesses.base import Harness
from harness_rl.rollout.group import ScoredGroup, group_metrics, safety_metrics, score_group
from harness_rl.rollout.proxy_admin import ProxyAdmin
from harness_rl.rollout.session import RolloutResult, RolloutSettings, run_rollout

__all__ = [
    "GroupCancelled",
    "RolloutWorker",
    "TaskSampler",
    "group_metrics",
    "pending_groups_bound",
    "safety_metrics",
    "score_group",
]

log = logging.getLogger(__name__)

RewardFn = Callable[[list[float | None], list[int]], list[float | None]]


class TaskSampler:
    """Draws tasks with given weights (the task mix's: source weight times difficulty weight).

    Args:
        tasks: The tasks to draw from.
        seed: Seed of the draws.
        weights: One positive weight per task (default: by difficulty label, ``difficulty_weights``).
        difficulty_weights: Weight of each difficulty label when ``weights`` is None (default: all 1).
    """

    def __init__(
        self,
        tasks: list[Task],
        seed: int,
        weights: Sequence[float] | None = None,
        difficulty_weights: dict[str, float] | None = None,
    ):
        if not tasks:
            raise ValueError("the task source gave no tasks for this split")
        if weights is None:
            by_label = {d: 1.0 for d in DIFFICULTIES} | dict(difficulty_weights or {})
            weights = [by_label[t.difficulty] for t in tasks]
        if len(weights) != len(tasks) or any(w < 0 for w in weights) or not any(w > 0 for w in weights):
            raise ValueError(f"need one non-negative weight per task and some positive; got {list(weights)[:10]}")
        self.tasks = tasks
        self.weights = list(weights)
        self._rng = random.Random(seed)

    def draw(self) -> Task:
        return self._rng.choices(self.tasks, weights=self.weights, k=1)[0]


#: ``max_pending_groups`` per concurrent group when not given: the shipped ``trainer.max_staleness`` (4), since
#: ``max_sessions // num_generations`` is ``tasks_per_step`` in the shipped configs.
DEFAULT_PENDING_PER_GROUP = 4


def pending_groups_bound(max_staleness: int, tasks_per_step: int) -> int:
    """Groups queued plus in flight a worker may have: about what the trainer can use before they go stale.

    A group launched now is trained on after the ``pending / tasks_per_step`` steps that consume the groups ahead
    of it, so more than ``max_staleness x tasks_per_step`` pending groups would start groups that are dropped.
    """
    return max(1, max_staleness) * max(1, tasks_per_step)


class GroupCancelled(RuntimeError):
    """The group's policy version fell out of the staleness window while it ran (see ``cancel_stale``)."""


@dataclass
class _GroupRun:
    """A group in flight: its pin, its rollout futures and whether it was cancelled."""

    group_id: int
    adapter: str
    version: int
    folder: Path
    futures: list[Future] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event)
    pinned: bool = True


class _GroupProxy:
    """The proxy as one group's rollouts see it: once the group is cancelled no session starts, and a session
    that ends gives no trace, so ``run_rollout`` marks the rollout unscorable instead of running its verifier."""

    def __init__(self, proxy: ProxyAdmin, run: _GroupRun):
        self._proxy = proxy
        self._run = run
        self.url = proxy.url

    def create_session(self, **kwargs: Any) -> str:
        self._check()
        return self._proxy.create_session(**kwargs)

    def end_session(self, key: str) -> dict[str, Any]:
        trace = self._proxy.end_session(key)  # always ended, so the proxy frees the session
        self._check()
        return trace

    def __getattr__(self, name: str) -> Any:
        # Any other admin call run_rollout makes goes to the real client unchanged.
        return getattr(self._proxy, name)

    def _check(self) -> None:
        if self._run.cancelled.is_set():
            raise GroupCancelled(f"group {self._run.group_id} on {self._run.adapter} was cancelled as stale")


class RolloutWorker:
    """Produces scored groups for one harness's trainer.

    Args:
        harness: The harness every rollout of this worker runs in.
        sampler: Draws the task of each group.
        proxy: Admin client of the capture proxy.
        registry: The engine's adapter registry; a group pins the harness's latest version while it runs. The
            worker registers ``cancel_stale`` as the harness's evictor, so a publish that finds the harness's
            slots full cancels the groups pinning retired versions.
        settings: Per-session limits and sampling policy.
        num_generations: Rollouts per group.
        max_sessions: Harness sessions running at once. One group more than fit is launched, its rollouts queued
            for session slots, so that a slot freed by a finished rollout is taken by the next group at once.
        run_dir: Rollouts go to ``run_dir/rollouts/<harness>/g<group>/r<i>``.
        reward_fn: ``(scores, tool_calls) -> rewards`` replacing the standard reward (correctness plus
            ``settings.efficiency_bonus``, minus ``settings.block_penalty`` per blocked call).
        scale_rewards: Divide advantages by the group's reward std.
        on_rollout: Called with each finished rollout (for logs and progress), from worker threads.
        max_pending_groups: No group is launched while this many are queued or in flight (see
            ``pending_groups_bound``); default ``DEFAULT_PENDING_PER_GROUP x max_sessions // num_generations``.

    Attributes:
        groups: Finished groups, in finishing order, for the trainer to take.
        errors: What stopped the worker (a group that failed other than by cancellation).
        stale_groups_cancelled: Groups cancelled by ``cancel_stale`` (never queued).
    """

    def __init__(
        self,
        *,
        harness: Harness,
        sampler: TaskSampler,
        proxy: ProxyAdmin,
        registry: AdapterRegistry,
        settings: RolloutSettings,
        num_generations: int,
        max_sessions: int,
        run_dir: Path,
        reward_fn: RewardFn | None = None,
        scale_rewards: bool = True,
        on_rollout: Callable[[RolloutResult], None] | None = None,
        max_pending_groups: int | None = None,
    ):
        self.harness = harness
        self.sampler = sampler
        self.proxy = proxy
        self.registry = registry
        self.settings = settings
        self.num_generations = num_generations
        self.max_sessions = max(max_sessions, num_generations)
        # One group more than the sessions hold: its rollouts wait in the session pool and start one by one as
        # the groups ahead finish theirs. Without it a session slot idles from the moment its rollout ends until
        # the group's slowest one does, and on CPU every harness of a group started at once, while the engine
        # sat idle (measured: ~28 s of mini-swe-agent start-up, then ~55 s of generation, per group of 8).
        self.max_groups = max(1, max_sessions // num_generations) + 1
        if max_pending_groups is None:
            max_pending_groups = DEFAULT_PENDING_PER_GROUP * max(1, max_sessions // num_generations)
        if max_pending_groups < 1:
            raise ValueError(f"max_pending_groups must be >= 1, got {max_pending_groups}")
        self.max_pending_groups = max_pending_groups
        self.run_dir = Path(run_dir)
        self.reward_fn = reward_fn
        self.scale_rewards = scale_rewards
        self.on_rollout = on_rollout
        self.groups: queue.Queue[ScoredGroup] = queue.Queue()
        self.stale_groups_cancelled = 0
        #: Where the harness runs its processes; a cancelled group's runs are stopped through it.
        self._sandbox = getattr(harness, "sandbox", None)
        self._stop = threading.Event()
        self._ids = itertools.count()
        self._slots = threading.Semaphore(self.max_groups)
        self._runs: dict[int, _GroupRun] = {}  # groups in flight that pinned their adapter
        self._in_flight = 0  # groups launched and not yet queued or discarded
        self._lock = threading.Lock()
        self._sessions = ThreadPoolExecutor(self.max_sessions, thread_name_prefix="rollout")  # sessions at once
        self._groups = ThreadPoolExecutor(self.max_groups, thread_name_prefix="group")
        self._thread = threading.Thread(target=self._loop, name=f"worker-{harness.name}", daemon=True)
        self.errors: list[BaseException] = []
        registry.add_evictor(harness.name, self.cancel_stale)

    def start(self) -> RolloutWorker:
        self._thread.start()
        return self

    def request_stop(self) -> None:
        """Launch no more groups; groups in flight go on until their harnesses end (or are killed)."""
        self._stop.set()

    def join(self, timeout_s: float = 60.0) -> None:
        """Wait for the groups in flight to finish (after their harness processes were stopped)."""
        self._thread.join(timeout=timeout_s)
        self._groups.shutdown(wait=True, cancel_futures=True)
        self._sessions.shutdown(wait=True, cancel_futures=True)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def pending_groups(self) -> int:
        """Groups queued for the trainer plus groups in flight."""
        with self._lock:
            return self._in_flight + self.groups.qsize()

    def cancel_stale(self, min_version: int) -> int:
        """Cancel the groups in flight pinned to a version below ``min_version``; returns how many.

        Call it with ``trainer.version - max_staleness`` after each publish: the trainer drops such groups
        anyway. Each is marked cancelled at once and its adapter pin released (so a retired version unloads
        now, and a full publish waiting in the registry proceeds); its group thread then stops the group's
        harness processes, and discards the group instead of queueing it. Safe from any thread; never blocks
        on the harness processes.
        """
        with self._lock:
            stale = [r for r in self._runs.values() if r.version < min_version and not r.cancelled.is_set()]
            for run in stale:
                run.cancelled.set()
            self.stale_groups_cancelled += len(stale)
        for run in stale:
            log.info("cancelling group %d of %s: v%d < v%d", run.group_id, self.harness.name, run.version, min_version)
            for future in list(run.futures):
                future.cancel()  # rollouts not started yet never start
            self._release_pin(run)
        return len(stale)

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.pending_groups >= self.max_pending_groups:
                # The trainer takes groups off the queue without telling us: poll.
                self._stop.wait(0.1)
                continue
            if not self._slots.acquire(timeout=0.5):
                continue
            if self._stop.is_set():
                self._slots.release()
                break
            group_id = next(self._ids)
            with self._lock:
                self._in_flight += 1
            self._groups.submit(self._run_group_safely, group_id, self.sampler.draw())

    def _run_group_safely(self, group_id: int, task: Task) -> None:
        try:
            group = self.run_group(group_id, task)
            if group is not None:
                self.groups.put(group)
        except BaseException as err:
            if self._stop.is_set():  # the run is shutting down: a group cut short is expected
                log.info("group %d discarded at shutdown: %s", group_id, err)
                return
            log.exception("group %d failed", group_id)  # surfaced to the trainer loop, which stops the run
            self.errors.append(err)
            self._stop.set()
        finally:
            with self._lock:
                self._in_flight -= 1  # after the put, so pending_groups never undercounts
            self._slots.release()

    def _pin_latest_adapter(self) -> str:
        """Acquire the harness's newest adapter version (retrying if it is retired in between)."""
        for _ in range(10):
            adapter = self.registry.latest(self.harness.name)
            if adapter is None:
                raise RuntimeError(f"no adapter published for harness {self.harness.name}")
            try:
                return self.registry.acquire(adapter)
            except KeyError:  # retired between latest() and acquire(): a newer one is live now
                continue
        raise RuntimeError(f"could not pin a live adapter version of {self.harness.name}")

    def _release_pin(self, run: _GroupRun) -> None:
        """Release the group's adapter pin exactly once (cancel_stale and the group thread both try)."""
        with self._lock:
            if not run.pinned:
                return
            run.pinned = False
        self.registry.release(run.adapter)

    def run_group(self, group_id: int, task: Task) -> ScoredGroup | None:
        """Run ``num_generations`` rollouts of ``task`` on the latest adapter version and score them.

        Returns None when the group was cancelled as stale while it ran.
        """
        adapter = self._pin_latest_adapter()
        version = int(adapter.rsplit("-v", 1)[1])
        group_dir = self.run_dir / "rollouts" / self.harness.name / f"g{group_id:05d}"
        run = _GroupRun(group_id, adapter, version, group_dir)
        with self._lock:
            self._runs[group_id] = run
        try:
            proxy = _GroupProxy(self.proxy, run)
            run.futures.extend(
                self._sessions.submit(
                    run_rollout,
                    task=task,
                    harness=self.harness,
                    proxy=proxy,
                    adapter=adapter,
                    settings=self.settings,
                    rollout_dir=group_dir / f"r{i}",
                )
                for i in range(self.num_generations)
            )
            self._wait_for_rollouts(run)
        finally:
            with self._lock:
                del self._runs[group_id]  # from here on cancel_stale no longer sees the group
            self._release_pin(run)
        if run.cancelled.is_set():
            log.info("group %d of %s discarded: cancelled as stale (v%d)", group_id, self.harness.name, version)
            return None
        return score_group(
            group_id,
            task,
            self.harness.name,
            version,
            [f.result() for f in run.futures],
            self.reward_fn,
            self.scale_rewards,
            on_rollout=self.on_rollout,
            block_penalty=self.settings.block_penalty,
            efficiency_bonus=self.settings.efficiency_bonus,
        )

    def _wait_for_rollouts(self, run: _GroupRun) -> None:
        """Wait until every rollout of the group is done; once it is cancelled, keep stopping its processes.

        The sweep repeats while rollouts are unfinished because a harness may start another process after one
        was stopped (set-up, then the agent).
        """
        pending = set(run.futures)
        while pending:
            if run.cancelled.is_set() and self._sandbox is not None:
                # Exactly the runs the sandbox started for this group's rollout folders (recorded PIDs).
                self._sandbox.terminate_under(run.folder)
            _, pending = wait(pending, timeout=0.5 if run.cancelled.is_set() else 1.0)
