"""One training run on one node: engine, capture proxy, one trainer and rollout worker per harness.

Every process and server this module starts is registered on an ``ExitStack`` the moment it exists, so an
error, Ctrl-C or SIGTERM at any point stops exactly what was started (by recorded PID), in reverse order.
"""

from __future__ import annotations

import logging
import signal
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from harness_rl.launch.components import (
    build_harness,
    build_task_sampler,
    check_harnesses_installed,
    rollout_settings,
    write_run_metadata,
)
from harness_rl.launch.progress import TrainingProgress
from harness_rl.launch.serving import start_serving

if TYPE_CHECKING:  # the trainer's modules import torch; the launcher imports them lazily
    from harness_rl.train.step_plan import AssembledStep, StepAssembler

log = logging.getLogger(__name__)


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_training(cfg: DictConfig) -> float:
    """Run ``cfg.trainer.max_steps`` optimizer steps per harness; returns the last step's mean reward."""
    # SIGTERM (scancel, a CI timeout) must unwind like Ctrl-C so every started process is stopped.
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        with ExitStack() as stack:
            return _run(cfg, stack)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(cfg: DictConfig, stack: ExitStack) -> float:
    from harness_rl.engine.adapters import AdapterRegistry
    from harness_rl.launch.placement import check_devices, describe, trainer_device
    from harness_rl.models.fetch import resolve_model_path
    from harness_rl.rollout.phases import mean_phases
    from harness_rl.rollout.worker import RolloutWorker, group_metrics, pending_groups_bound
    from harness_rl.sandbox.isolation import require_isolation
    from harness_rl.sandbox.local import LocalSandbox
    from harness_rl.tracking import build_metrics
    from harness_rl.tracking.jsonl import JsonlSink
    from harness_rl.train.trainer import PolicyTrainer

    # What this machine may lack (the weights, a GPU, a harness) fails here in seconds, in one line, before a
    # run folder or a process exists.
    model_path = resolve_model_path(cfg.model.path)
    check_devices(cfg)
    log.info(describe(cfg))
    run_dir = Path(cfg.run_dir)
    sandbox = LocalSandbox(
        address_space_bytes=int(cfg.budget.memory_limit_gib * (1 << 30)),
        hidden_paths=(run_dir,),
        niceness=cfg.budget.niceness,
    )
    require_isolation(sandbox.isolation, allow_unisolated=cfg.sandbox.allow_unisolated, entry_point="train.py")
    harnesses = {name: build_harness(name, cfg, sandbox) for name in cfg.harness.mix}
    check_harnesses_installed(harnesses)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    write_run_metadata(run_dir, cfg, model_path, harnesses, isolation=sandbox.isolation)
    log.info("run folder: %s", run_dir)

    metrics = build_metrics(
        run_dir,
        wandb_enabled=cfg.logger.wandb.enabled,
        wandb_mode=cfg.logger.wandb.mode,
        project=cfg.logger.wandb.project,
        name=cfg.run_name,
        config=OmegaConf.to_container(cfg, resolve=True),
    )
    stack.callback(metrics.close)
    rollout_log = JsonlSink(run_dir / "rollouts.jsonl")
    stack.callback(rollout_log.close)

    serving = start_serving(cfg, model_path, run_dir, stack, status=TrainingProgress.status)
    proxy, client = serving.proxy, serving.client
    registry = AdapterRegistry(client, max_live_versions=cfg.trainer.max_staleness + 2)
    settings = rollout_settings(cfg)
    progress = stack.enter_context(TrainingProgress(list(harnesses), cfg.trainer.max_steps))

    trainers: dict[str, PolicyTrainer] = {}
    workers: dict[str, RolloutWorker] = {}

    def stop_rollouts() -> None:
        # Order matters: no new groups, then kill the harness processes in flight, then wait for their
        # groups to unwind (they still reach the proxy, which is stopped only after this).
        for w in workers.values():
            w.request_stop()
        stopped = sandbox.terminate_all()
        if stopped:
            log.info("stopped %d harness run(s) in flight", len(stopped))
        for w in workers.values():
            w.join()

    stack.callback(stop_rollouts)

    for index, (name, harness) in enumerate(harnesses.items()):
        with TrainingProgress.status(f"loading trainer for {name}"):
            trainer = PolicyTrainer(
                harness=name,
                model_path=model_path,
                trainer_cfg=cfg.trainer,
                family=cfg.model.family,
                registry=registry,
                run_dir=run_dir,
                seed=cfg.seed + index,
                device=trainer_device(cfg, index),
            )
        trainer.publish()  # v0: the untrained adapter, so every rollout names an adapter version
        trainers[name] = trainer

        def on_rollout(result, name=name):
            rollout_log.log({"harness": name, **result.summary()})
            progress.rollout_done(name, result)

        worker = RolloutWorker(
            harness=harness,
            sampler=build_task_sampler(cfg, seed=cfg.seed + index),
            proxy=proxy,
            registry=registry,
            settings=settings,
            num_generations=cfg.trainer.num_generations,
            max_sessions=cfg.trainer.max_sessions,
            run_dir=run_dir,
            scale_rewards=cfg.trainer.scale_rewards,
            on_rollout=on_rollout,
            max_pending_groups=pending_groups_bound(cfg.trainer.max_staleness, cfg.trainer.tasks_per_step),
        )
        workers[name] = worker.start()

    # One assembler per trainer, kept across steps: a group that did not fit one step opens the next.
    assemblers = {name: trainer.assembler() for name, trainer in trainers.items()}
    stall_limit = cfg.trainer.stop_after_uninformative_groups
    active = dict(trainers)
    last_reward = 0.0
    for step in range(1, cfg.trainer.max_steps + 1):
        # One harness after another: on one node the trainers share the CPU/GPU (a cluster launcher
        # would give each harness's trainer its own job, and this loop a single entry).
        for name, trainer in list(active.items()):
            t0 = time.perf_counter()
            groups = collect_groups(workers[name], assemblers[name], progress, name, stall_limit=stall_limit)
            if groups is None:
                streak = assemblers[name].uninformative_streak
                stop_stalled_trainer(name, trainer, workers[name], metrics, streak, cfg.trainer.checkpoint_every)
                del active[name]
                continue
            wait_s = time.perf_counter() - t0
            progress.training(name)
            # reward/* over every scored group the step consumed (skipped uninformative ones included), so a
            # policy that solves everything or nothing is not reported by the few groups it happened to train on.
            step_metrics = {
                **group_metrics(groups.consumed),
                **trained_rewards(group_metrics(groups.trained)),
                "batch/skipped_groups": len(groups.skipped),
                **trainer.train_step(groups.trained),
            }
            # Groups still sampling on a version the trainer would now drop as stale free their adapter slot.
            workers[name].cancel_stale(trainer.version - cfg.trainer.max_staleness)
            step_metrics["batch/stale_groups_cancelled"] = workers[name].stale_groups_cancelled
            step_metrics["time/wait_for_rollouts_s"] = wait_s
            # Where the step's rollouts spent their time (rollout/phases.py): time/rollout_<phase> means.
            step_metrics.update(mean_phases(r.phases for g in groups.consumed for r in g.rollouts))
            if step % cfg.trainer.checkpoint_every == 0 or step == cfg.trainer.max_steps:
                step_metrics["checkpoint"] = str(trainer.checkpoint())
            metrics.log({f"{name}/{k}": v for k, v in step_metrics.items()} | {"harness": name}, step=step)
            progress.step_done(name, step_metrics)
            last_reward = step_metrics["reward/mean"]
        if not active:
            break
    steps = {name: trainer.step for name, trainer in trainers.items()}
    log.info("finished: optimizer steps %s; run folder %s", steps, run_dir)
    return last_reward


def collect_groups(
    worker: Any, assembler: StepAssembler, progress: TrainingProgress, name: str, *, stall_limit: int = 0
) -> AssembledStep | None:
    """Feed finished groups from the worker's queue to the step assembler until the step is full.

    The assembler (:class:`harness_rl.train.step_plan.StepAssembler`) takes groups until the step's
    ``grad_accum`` token-budgeted micro-batches would overflow (at most ``tasks_per_step`` groups), holds the group
    that did not fit over for the next step, and skips uninformative groups (dynamic sampling) with a fallback, so
    a model that never (or always) solves its tasks still makes progress instead of hanging.

    Returns None instead when ``stall_limit`` (> 0) groups in a row had no reward variance: the policy solves every
    task or none, GRPO has no gradient to follow, and further rollouts would only burn compute.
    """
    import queue

    while not assembler.full:
        if worker.errors:
            raise RuntimeError(f"rollout worker for {name} failed") from worker.errors[0]
        try:
            group = worker.groups.get(timeout=1.0)
        except queue.Empty:
            progress.waiting(name, len(assembler.trained), assembler.max_groups)
            continue
        assembler.offer(group)
        if stall_limit > 0 and assembler.uninformative_streak >= stall_limit:
            return None
        progress.waiting(name, len(assembler.trained), assembler.max_groups)
    return assembler.finish()


def stop_stalled_trainer(
    name: str, trainer: Any, worker: Any, metrics: Any, streak: int, checkpoint_every: int
) -> None:
    """End one harness's training early: no new groups, a checkpoint of its last step, the reason in the metrics."""
    worker.request_stop()
    reason = "groups in a row without reward variance (trainer.stop_after_uninformative_groups)"
    log.warning("%s: %d %s; its training stops after step %d", name, streak, reason, trainer.step)
    record: dict[str, Any] = {f"{name}/stopped/uninformative_groups": streak, "harness": name}
    if trainer.step > 0 and trainer.step % checkpoint_every != 0:
        # The last step has no checkpoint yet: write it, so the run's final policy can be evaluated.
        record[f"{name}/checkpoint"] = str(trainer.checkpoint())
    metrics.log(record, step=trainer.step)


def trained_rewards(metrics: dict[str, Any]) -> dict[str, Any]:
    """``reward/*`` of the groups trained on, as ``reward/<name>_trained`` (beside the all-groups ``reward/*``)."""
    return {f"{key}_trained": value for key, value in metrics.items() if key.startswith("reward/")}
