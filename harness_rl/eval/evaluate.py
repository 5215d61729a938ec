"""One evaluation of a training run: base model and every checkpoint, on held-out tasks, in each harness.

One vLLM engine holds the base weights once; each checkpoint is loaded into it as an adapter while its cells
run, in a sandbox pool of its own, through one capture proxy (sessions of purpose ``eval``). Every process
this module starts is registered on an ``ExitStack`` the moment it exists, so an error, Ctrl-C or SIGTERM stops
exactly what was started. Finished cells are in ``eval/results.jsonl``; a rerun skips them and starts no engine
when nothing is left to run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from harness_rl.eval.metrics import summarize
from harness_rl.eval.plan import Cell, Checkpoint, find_checkpoints, plan_cells, select_checkpoints
from harness_rl.eval.progress import EvalProgressBar
from harness_rl.eval.report import markdown_table, write_report
from harness_rl.eval.results import ResultsStore, record_key
from harness_rl.eval.runner import pending_cells, run_cells
from harness_rl.eval.tracking import log_summary

log = logging.getLogger(__name__)


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def result_record(cell: Cell, result: Any) -> dict[str, Any]:
    """The ``results.jsonl`` record of one finished cell (a ``RolloutResult`` of ``run_rollout``)."""
    trace = result.trace or {}
    nodes = [n for n in trace.get("nodes", []) if not n.get("budget_exhausted")]
    return {
        "checkpoint": cell.checkpoint.label,
        "trained_harness": cell.checkpoint.trained_harness,
        "step": cell.checkpoint.step,
        "harness": cell.harness,
        "task_id": cell.task_id,
        "sample": cell.sample,
        "adapter": result.adapter,
        "score": result.score,
        "solved": result.score is not None and result.score >= 1.0,
        "unscorable": result.unscorable,
        "tool_calls": result.tool_calls,
        "generated_tokens": sum(len(n.get("completion_token_ids") or []) for n in nodes),
        "requests": trace.get("requests"),
        "blocked": len(result.blocked),
        "blocked_rules": [b.get("rule") for b in result.blocked],
        "seconds": round(result.seconds, 3),
        "exit_kind": result.outcome.exit_kind if result.outcome else None,
        "rollout_dir": str(result.rollout_dir),
        "time": time.time(),
    }


def held_out_tasks(cfg: DictConfig) -> list[Any]:
    """The tasks of ``eval.split`` from the run's task source, narrowed by ``eval.task_ids``/``eval.max_tasks``."""
    from harness_rl.launch.components import build_task_sampler

    split_cfg = cfg.copy()
    split_cfg.tasks.split = cfg.eval.split
    tasks = sorted(build_task_sampler(split_cfg, seed=cfg.seed).tasks, key=lambda t: t.id)
    if cfg.eval.task_ids is not None:
        wanted = list(cfg.eval.task_ids)
        unknown = sorted(set(wanted) - {t.id for t in tasks})
        if unknown:
            raise ValueError(f"eval.task_ids {unknown} are not in split {cfg.eval.split!r}")
        tasks = [t for t in tasks if t.id in wanted]
    if cfg.eval.max_tasks is not None:
        tasks = tasks[: cfg.eval.max_tasks]
    return tasks


def eval_settings(cfg: DictConfig) -> Any:
    """The run's per-session limits (as in training); sampling is the harness's own unless ``eval`` sets it."""
    import dataclasses

    from harness_rl.launch.components import rollout_settings

    return dataclasses.replace(
        rollout_settings(cfg),
        # None keeps what the harness sends (the proxy's session policy leaves unset fields alone).
        temperature=cfg.eval.temperature,
        max_tokens=cfg.eval.max_tokens_per_turn or cfg.trainer.max_tokens_per_turn,
        purpose="eval",
        block_penalty=0.0,
    )


class _RolloutPool:
    """Runs the cells of one checkpoint with ``run_rollout`` (see ``runner.CellPool``)."""

    def __init__(self, *, harnesses: dict[str, Any], sandbox: Any, proxy: Any, tasks: dict[str, Any],
                 settings: Any, out_dir: Path):  # fmt: skip
        self.harnesses, self.sandbox, self.proxy = harnesses, sandbox, proxy
        self.tasks, self.settings, self.out_dir = tasks, settings, out_dir

    def run(self, cell: Cell) -> dict[str, Any]:
        from harness_rl.rollout.session import run_rollout

        rollout_dir = self.out_dir / cell.checkpoint.label / cell.harness / cell.task_id / f"s{cell.sample}"
        shutil.rmtree(rollout_dir, ignore_errors=True)  # what an interrupted try of this cell left
        result = run_rollout(task=self.tasks[cell.task_id], harness=self.harnesses[cell.harness], proxy=self.proxy,
                             adapter=cell.checkpoint.engine_name, settings=self.settings,
                             rollout_dir=rollout_dir)  # fmt: skip
        return result_record(cell, result)

    def abort(self) -> None:
        stopped = self.sandbox.terminate_all()
        if stopped:
            log.info("stopped %d harness run(s) in flight", len(stopped))


def run_evaluation(cfg: DictConfig) -> pd.DataFrame:
    """Evaluate the run ``cfg.run``; writes ``<run>/eval/`` and returns the summary (one line per row)."""
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        with ExitStack() as stack:
            return _evaluate(cfg, stack)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _evaluate(cfg: DictConfig, stack: ExitStack) -> pd.DataFrame:
    run_dir = Path(cfg.run).resolve()
    eval_dir = run_dir / "eval"
    eval_dir.mkdir(parents=True, exist_ok=True)
    (eval_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    harness_names = list(cfg.harness.mix)
    available = find_checkpoints(run_dir, None if cfg.eval.cross_harness else harness_names)
    checkpoints = select_checkpoints(available, None if cfg.checkpoints is None else list(cfg.checkpoints))
    tasks = {t.id: t for t in held_out_tasks(cfg)}
    if not tasks:
        sources = [s.name for s in cfg.tasks.sources]
        raise ValueError(f"no held-out tasks in split {cfg.eval.split!r} of tasks.sources={sources}")
    cells = plan_cells(checkpoints, harness_names, list(tasks), samples=cfg.eval.samples,
                       cross_harness=cfg.eval.cross_harness)  # fmt: skip
    log.info("evaluating %s: %d checkpoint(s) + base, harnesses %s, %d held-out task(s) x %d sample(s) = %d cells",
             run_dir, len(checkpoints), harness_names, len(tasks), cfg.eval.samples, len(cells))  # fmt: skip
    store = ResultsStore(eval_dir / "results.jsonl")
    if pending_cells(cells, store):
        _run_pending(cfg, stack, run_dir, eval_dir, cells, tasks, store)
    else:
        log.info("every cell is already in %s; nothing to run", store.path)

    planned = {cell.key for cell in cells}
    results = pd.DataFrame([r for r in store.records if record_key(r) in planned])
    summary = summarize(results, pass_k=list(cfg.eval.pass_k), seed=cfg.eval.bootstrap_seed)
    paths = write_report(summary, eval_dir)
    log_summary(cfg, eval_dir, summary)
    log.info("evaluation table (%s):\n%s", paths["table.md"], markdown_table(summary))
    return summary


def _run_pending(cfg: DictConfig, stack: ExitStack, run_dir: Path, eval_dir: Path, cells: list[Cell],
                 tasks: dict[str, Any], store: ResultsStore) -> None:  # fmt: skip
    from harness_rl.launch.components import build_harness, check_harnesses_installed
    from harness_rl.launch.serving import start_serving
    from harness_rl.models.fetch import resolve_model_path
    from harness_rl.sandbox.isolation import require_isolation
    from harness_rl.sandbox.local import LocalSandbox

    def new_sandbox() -> LocalSandbox:
        return LocalSandbox(address_space_bytes=int(cfg.budget.memory_limit_gib * (1 << 30)),
                            hidden_paths=(run_dir,), niceness=cfg.budget.niceness)  # fmt: skip

    require_isolation(new_sandbox().isolation, allow_unisolated=cfg.sandbox.allow_unisolated, entry_point="eval.py")

    check_harnesses_installed({name: build_harness(name, cfg, new_sandbox()) for name in cfg.harness.mix})
    model_path = resolve_model_path(cfg.model.path)
    serving = start_serving(cfg, model_path, eval_dir, stack, status=EvalProgressBar.status)
    proxy, client = serving.proxy, serving.client
    settings = eval_settings(cfg)

    @contextlib.contextmanager
    def open_pool(checkpoint: Checkpoint) -> Iterator[_RolloutPool]:
        sandbox = new_sandbox()
        harnesses = {name: build_harness(name, cfg, sandbox) for name in cfg.harness.mix}
        if checkpoint.engine_name is not None:
            client.load_adapter(checkpoint.engine_name, checkpoint.adapter_dir)
        pool = _RolloutPool(harnesses=harnesses, sandbox=sandbox, proxy=proxy, tasks=tasks, settings=settings,
                            out_dir=eval_dir / "rollouts")  # fmt: skip
        try:
            yield pool
        finally:
            pool.abort()
            if checkpoint.engine_name is not None:
                with contextlib.suppress(Exception):  # the engine may already be going down (Ctrl-C)
                    client.unload_adapter(checkpoint.engine_name)

    progress = stack.enter_context(EvalProgressBar())
    started = time.perf_counter()
    ran = run_cells(cells, store, open_pool, max_sessions=cfg.eval.max_sessions, progress=progress)
    log.info("ran %d cell(s) in %.0f s", ran, time.perf_counter() - started)
    (eval_dir / "last_pass.json").write_text(json.dumps({"cells_run": ran, "seconds": time.perf_counter() - started}))
