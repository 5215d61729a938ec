"""Benchmark: where a CPU rollout's seconds go, by phase (sandbox set-up, harness start-up, generation, tools,
verifier).

    python -m benchmarks.rollout_phases [--rollouts 8] [--compare "budget.niceness=0"] [OVERRIDE ...]
    python -m benchmarks.rollout_phases --run RUN_DIR [--run OTHER_RUN_DIR]

Live mode composes the default training config (plus any Hydra ``OVERRIDE``), starts the vLLM CPU engine and the
capture proxy through the project's own serving code (``launch/serving.py``, as ``train.py`` does), and runs
``--rollouts`` rollouts of the config's harness on its training tasks, a group of ``trainer.num_generations`` at
a time, concurrently, as the rollout worker runs them (one group in flight when ``max_sessions`` equals the group
size). Each ``--compare`` is a space-separated set of overrides run after the baseline with a fresh engine, so a
switch (``budget.niceness=0``, ``engine.env.VLLM_CPU_OMP_THREADS_BIND=0-1``) is measured side by side. Rollouts
run on the base model (no adapter), so no trainer is loaded; a training run samples through a LoRA adapter.

``--run`` reads a finished run's ``rollouts.jsonl`` instead. Rollouts recorded before phase timing existed are
reconstructed from their folders (marked ``~``): launch = outcome.json's time minus the harness's seconds, the
first call and the engine time from trace.jsonl's nodes, the verifier from ``verifier/output.log``'s time; their
sandbox set-up is unknown (0).

Prints one table: per phase, the mean and median seconds per rollout of each variant.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import statistics
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness_rl.proxy.sessions import union_seconds
from harness_rl.rollout.phases import PHASES

log = logging.getLogger(__name__)


def live_phases(overrides: Sequence[str], n_rollouts: int, seed: int = 0) -> list[dict[str, float]]:
    """Run ``n_rollouts`` rollouts of the composed config on a freshly started engine; their phase records."""
    from harness_rl.config.compose import compose_config
    from harness_rl.launch.components import build_harness, build_task_sampler, rollout_settings
    from harness_rl.launch.serving import start_serving
    from harness_rl.models.fetch import resolve_model_path
    from harness_rl.rollout.session import run_rollout
    from harness_rl.sandbox.local import LocalSandbox

    cfg = compose_config(list(overrides))
    model_path = resolve_model_path(cfg.model.path)
    settings = rollout_settings(cfg)
    group_size = cfg.trainer.num_generations
    sampler = build_task_sampler(cfg, seed=seed)
    phases: list[dict[str, float]] = []
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="rollout-phases-") as tmp:
        out_dir = Path(tmp)
        sandbox = LocalSandbox(
            address_space_bytes=int(cfg.budget.memory_limit_gib * (1 << 30)),
            hidden_paths=(out_dir,),
            niceness=cfg.budget.niceness,
        )
        stack.callback(sandbox.terminate_all)
        harness = build_harness(cfg.harness.mix[0], cfg, sandbox)
        serving = start_serving(cfg, model_path, out_dir, stack, status=_logged)
        with ThreadPoolExecutor(max_workers=max(group_size, cfg.trainer.max_sessions)) as pool:
            for group in range((n_rollouts + group_size - 1) // group_size):
                task = sampler.draw()
                futures = [
                    pool.submit(
                        run_rollout,
                        task=task,
                        harness=harness,
                        proxy=serving.proxy,
                        adapter=None,
                        settings=settings,
                        rollout_dir=out_dir / f"g{group}" / f"r{i}",
                    )
                    for i in range(min(group_size, n_rollouts - group * group_size))
                ]
                for future in futures:
                    result = future.result()
                    log.info("%s: %s (%s)", result.rollout_dir.name, result.phases, result.unscorable or "scorable")
                    if result.phases:
                        phases.append(result.phases)
    return phases


def run_phases(run_dir: Path) -> tuple[list[dict[str, float]], int]:
    """The phase records of a run's rollouts (reconstructed where it predates phase timing), and how many of
    them were reconstructed."""
    rows: list[dict[str, float]] = []
    rebuilt = 0
    for line in (Path(run_dir) / "rollouts.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("phases"):
            rows.append(record["phases"])
            continue
        phases = reconstruct_phases(Path(record["rollout_dir"]))
        if phases is not None:
            rows.append(phases)
            rebuilt += 1
    return rows, rebuilt


def reconstruct_phases(rollout_dir: Path) -> dict[str, float] | None:
    """Phases of a rollout recorded without them, from its folder's files (None when they are missing)."""
    try:
        outcome = json.loads((rollout_dir / "outcome.json").read_text())
        lines = (rollout_dir / "trace.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return None
    nodes = [n for n in map(json.loads, lines) if n.get("type") == "node" and not n.get("budget_exhausted")]
    # The trace and outcome are written right after the harness's run returns, before the verifier starts.
    harness_end = (rollout_dir / "trace.jsonl").stat().st_mtime
    launch = harness_end - float(outcome.get("seconds") or 0.0)
    harness_s = harness_end - launch
    startup = min(max(nodes[0]["t_start"] - launch, 0.0), harness_s) if nodes else harness_s
    generation = min(union_seconds([(n["t_start"], n["t_end"]) for n in nodes]), harness_s - startup)
    verifier_log = rollout_dir / "verifier" / "output.log"
    verifier_s = max(verifier_log.stat().st_mtime - harness_end, 0.0) if verifier_log.exists() else 0.0
    return {
        "sandbox_setup_s": 0.0,
        "harness_startup_s": startup,
        "generation_s": generation,
        "tools_s": max(harness_s - startup - generation, 0.0),
        "verifier_s": verifier_s,
        "total_s": harness_s + verifier_s,
    }


def summarize(rows: Sequence[dict[str, float]]) -> dict[str, tuple[float, float]]:
    """Per phase: (mean, median) seconds over the rollouts."""
    return {
        k: (statistics.fmean(r[k] for r in rows), statistics.median(r[k] for r in rows))
        for k in PHASES
        if rows and all(k in r for r in rows)
    }


def print_table(variants: dict[str, list[dict[str, float]]], console: Console | None = None) -> None:
    """One row per phase, a mean and a median column per variant; the last line is machine-readable."""
    console = console or Console()
    table = Table(title="seconds per rollout, by phase")
    table.add_column("phase")
    stats = {name: summarize(rows) for name, rows in variants.items()}
    for name, rows in variants.items():
        table.add_column(f"{name}\nmean (n={len(rows)})", justify="right")
        table.add_column("p50", justify="right")
    for phase in PHASES:
        cells = []
        for name in variants:
            mean, p50 = stats[name].get(phase, (float("nan"), float("nan")))
            cells += [f"{mean:.2f}", f"{p50:.2f}"]
        table.add_row(phase, *cells)
    console.print(table)
    for name in variants:
        console.print(name + ": " + " ".join(f"{k}={v[0]:.2f}" for k, v in stats[name].items()), soft_wrap=True)


@contextlib.contextmanager
def _logged(message: str):
    log.info("%s ...", message)
    yield


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the baseline (e.g. trainer.max_sessions=4)")
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts per variant (live mode)")
    parser.add_argument("--compare", action="append", default=[], help="a variant: space-separated overrides")
    parser.add_argument("--run", action="append", type=Path, default=[], help="read RUN/rollouts.jsonl instead")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    variants: dict[str, list[dict[str, float]]] = {}
    if args.run:
        for run_dir in args.run:
            rows, rebuilt = run_phases(run_dir)
            variants[f"{'~' if rebuilt else ''}{run_dir.name}"] = rows
    else:
        for extra in ["", *args.compare]:
            name = extra or "baseline"
            started = time.monotonic()
            variants[name] = live_phases([*args.overrides, *shlex.split(extra)], args.rollouts)
            seconds = time.monotonic() - started
            log.info("variant %s: %d rollouts in %.0f s (engine start included)", name, len(variants[name]), seconds)
    print_table(variants)


if __name__ == "__main__":
    main()
