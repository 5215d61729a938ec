"""The rollout worker: keeps harness sessions in flight and turns finished GRPO groups into training samples.

It runs in background threads next to the trainer, so sampling never waits for an optimizer step (the
"asynchronous" of async GRPO). Each group is pinned to the adapter version that was live when it started; the
trainer drops groups that fell more than ``max_staleness`` versions behind by the time it trains on them.
"""

from __future__ import annotations

import itertools
import logging
import queue
import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness_rl.engine.adapters import AdapterRegistry
from harness_rl.envs.spec import DIFFICULTIES
from harness_rl.envs.task import Task
from harness_rl.harnesses.base import Harness
from harness_rl.rollout.group import ScoredGroup, group_metrics, safety_metrics, score_group
from harness_rl.rollout.proxy_admin import ProxyAdmin
from harness_rl.rollout.session import RolloutResult, RolloutSettings, run_rollout

__all__ = ["RolloutWorker", "TaskSampler", "group_metrics", "safety_metrics", "score_group"]

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


class RolloutWorker:
    """Produces scored groups for one harness's trainer.

    Args:
        harness: The harness every rollout of this worker runs in.
        sampler: Draws the task of each group.
        proxy: Admin client of the capture proxy.
        registry: The engine's adapter registry; a group pins the harness's latest version while it runs.
        settings: Per-session limits and sampling policy.
        num_generations: Rollouts per group.
        max_sessions: Harness sessions in flight at once (whole groups only).
        run_dir: Rollouts go to ``run_dir/rollouts/<harness>/g<group>/r<i>``.
        reward_fn: ``(scores, tool_calls) -> rewards`` replacing the standard reward (correctness plus
            ``settings.efficiency_bonus``, minus ``settings.block_penalty`` per blocked call).
        scale_rewards: Divide advantages by the group's reward std.
        on_rollout: Called with each finished rollout (for logs and progress), from worker threads.
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
    ):
        self.harness = harness
        self.sampler = sampler
        self.proxy = proxy
        self.registry = registry
        self.settings = settings
        self.num_generations = num_generations
        self.max_groups = max(1, max_sessions // num_generations)
        self.run_dir = Path(run_dir)
        self.reward_fn = reward_fn
        self.scale_rewards = scale_rewards
        self.on_rollout = on_rollout
        self.groups: queue.Queue[ScoredGroup] = queue.Queue()
        self._stop = threading.Event()
        self._ids = itertools.count()
        self._slots = threading.Semaphore(self.max_groups)
        self._sessions = ThreadPoolExecutor(self.max_groups * num_generations, thread_name_prefix="rollout")
        self._groups = ThreadPoolExecutor(self.max_groups, thread_name_prefix="group")
        self._thread = threading.Thread(target=self._loop, name=f"worker-{harness.name}", daemon=True)
        self.errors: list[BaseException] = []

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

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.5):
                continue
            if self._stop.is_set():
                self._slots.release()
                break
            group_id = next(self._ids)
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

    def run_group(self, group_id: int, task: Task) -> ScoredGroup | None:
        """Run ``num_generations`` rollouts of ``task`` on the latest adapter version and score them."""
        adapter = self._pin_latest_adapter()
        try:
            version = int(adapter.rsplit("-v", 1)[1])
            group_dir = self.run_dir / "rollouts" / self.harness.name / f"g{group_id:05d}"
            futures = [
                self._sessions.submit(
                    run_rollout,
                    task=task,
                    harness=self.harness,
                    proxy=self.proxy,
                    adapter=adapter,
                    settings=self.settings,
                    rollout_dir=group_dir / f"r{i}",
                )
                for i in range(self.num_generations)
            ]
            rollouts = [f.result() for f in futures]
        finally:
            self.registry.release(adapter)
        return score_group(
            group_id, task, self.harness.name, version, rollouts, self.reward_fn, self.scale_rewards,
            on_rollout=self.on_rollout, block_penalty=self.settings.block_penalty,
            efficiency_bonus=self.settings.efficiency_bonus,
        )  # fmt: skip
