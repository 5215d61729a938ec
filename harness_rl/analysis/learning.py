"""Did training work: one results row per (run, harness) and the learning-curve figure over several runs.

The row is the claim of an experiment in numbers: held-out pass@1 of the base model and of the final
checkpoint, their difference with its 95% bootstrap interval (``eval/summary.csv`` of ``python eval.py run=RUN``),
how many tasks and samples it rests on, and what it cost in wall time. The figure draws the training reward of
every step beside the held-out pass@1 of every checkpoint, one line per run (per seed), so a reader sees both
whether the reward rose and whether that carried over to tasks never seen in training.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from harness_rl.analysis.axes import rate_axis, reward_axis, step_axis
from harness_rl.analysis.loaders import (
    load_config,
    load_eval_results,
    load_eval_summary,
    load_metadata,
    load_metrics,
    training_curves,
)
from harness_rl.analysis.plots import error_bars
from harness_rl.analysis.timing import eval_wall_s, train_times

#: The training metric of the left panel: mean reward over every scored rollout of the groups a step consumed,
#: zero-variance groups (skipped by the trainer) included (see ``harness_rl.launch.train_run``).
TRAIN_REWARD = "reward/mean"
#: The held-out metric of the right panel (a column of ``eval/summary.csv``, with ``_lo``/``_hi``).
HELD_OUT = "pass@1"
#: Logged when a trainer stops early (trainer.stop_after_uninformative_groups): groups in a row with equal rewards.
STOPPED = "stopped/uninformative_groups"
#: The label of the base model's rows in ``eval/summary.csv``.
BASE = "base"


@dataclass
class RunData:
    """What the report reads from one training run folder."""

    path: Path
    config: dict[str, Any]
    metadata: dict[str, Any]
    curves: pd.DataFrame
    metrics: pd.DataFrame
    summary: pd.DataFrame
    eval_results: pd.DataFrame

    @property
    def name(self) -> str:
        """``<run name folder>/<date folder>``: what tells runs of one experiment apart."""
        return f"{self.path.parent.name}/{self.path.name}"

    @property
    def seed(self) -> int | None:
        return self.config.get("seed")

    @property
    def advantage_sign(self) -> float:
        return float((self.config.get("trainer") or {}).get("advantage_sign", 1.0))

    @property
    def negative_control(self) -> bool:
        """The run flipped its advantages (``trainer.advantage_sign=-1``): it must not improve."""
        return self.advantage_sign < 0

    @property
    def harnesses(self) -> list[str]:
        mix = list((self.config.get("harness") or {}).get("mix") or [])
        seen = sorted(set(self.curves["harness"])) if len(self.curves) else []
        return mix or seen

    def label(self, harness: str) -> str:
        """The legend entry: the seed, the harness when the run trained several, the control when it is one."""
        text = f"seed {self.seed}"
        if len(self.harnesses) > 1:
            text += f" {harness}"
        return text + (" (negative control)" if self.negative_control else "")


def read_run(run_dir: Path | str) -> RunData:
    """Load one training run folder.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``config.yaml`` (it is not a run folder).
    """
    path = Path(run_dir).expanduser().resolve()
    if not (path / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir} is not a training run folder: no config.yaml in it")
    metrics = load_metrics(path)
    return RunData(
        path=path,
        config=load_config(path) or {},
        metadata=load_metadata(path),
        curves=training_curves(metrics),
        metrics=metrics,
        summary=load_eval_summary(path),
        eval_results=load_eval_results(path),
    )


def _native(summary: pd.DataFrame, harness: str) -> pd.DataFrame:
    """The base row and the checkpoints trained in ``harness``, evaluated in ``harness``, by step."""
    if summary.empty or "harness" not in summary:
        return summary
    rows = summary[summary["harness"] == harness]
    rows = rows[(rows["checkpoint"] == BASE) | (rows["trained_harness"] == harness)]
    return rows.sort_values("step")


def _value(row: pd.Series | None, column: str) -> float:
    if row is None or column not in row or pd.isna(row[column]):
        return math.nan
    return float(row[column])


def result_rows(run: RunData) -> list[dict[str, Any]]:
    """One row per harness of ``run``: seed, control, base and final pass@1, their difference with its interval,
    tasks and samples behind them, wall times, and a note when something is missing (no evaluation yet)."""
    rows = []
    times = train_times(run.path, run.metadata, run.metrics)
    eval_s = eval_wall_s(run.eval_results)
    for harness in run.harnesses:
        reward = run.curves[(run.curves["harness"] == harness) & (run.curves["metric"] == TRAIN_REWARD)]
        native = _native(run.summary, harness)
        base = native[native["checkpoint"] == BASE] if len(native) else native
        checkpoints = native[native["checkpoint"] != BASE] if len(native) else native
        base_row = base.iloc[0] if len(base) else None
        final = checkpoints.iloc[-1] if len(checkpoints) else None
        notes = []
        if reward.empty:
            notes.append("no optimizer step logged yet (metrics.jsonl)")
        stopped = run.curves[(run.curves["harness"] == harness) & (run.curves["metric"] == STOPPED)]
        if len(stopped):
            last, streak = int(stopped["step"].max()), int(stopped["value"].max())
            notes.append(f"stopped after step {last}: {streak} groups in a row without reward variance")
        if run.summary.empty:
            notes.append(f"not evaluated: no eval/summary.csv; run  python eval.py run={run.path}")
        else:
            if base_row is None:
                notes.append(f"eval/summary.csv has no base row for {harness}")
            if final is None:
                notes.append(f"eval/summary.csv has no checkpoint of {harness}")
        tasks = _value(final if final is not None else base_row, "tasks")
        rollouts = _value(final if final is not None else base_row, "rollouts")
        rows.append(
            {
                "run": run.name,
                "harness": harness,
                "seed": run.seed,
                "negative_control": run.negative_control,
                "advantage_sign": run.advantage_sign,
                "train_steps": int(reward["step"].max()) if len(reward) else 0,
                "final_train_reward": float(reward.sort_values("step")["value"].iloc[-1]) if len(reward) else math.nan,
                "base_pass@1": _value(base_row, HELD_OUT),
                "base_pass@1_lo": _value(base_row, f"{HELD_OUT}_lo"),
                "base_pass@1_hi": _value(base_row, f"{HELD_OUT}_hi"),
                "final_checkpoint": None if final is None else str(final["checkpoint"]),
                "final_step": None if final is None else int(final["step"]),
                "final_pass@1": _value(final, HELD_OUT),
                "final_pass@1_lo": _value(final, f"{HELD_OUT}_lo"),
                "final_pass@1_hi": _value(final, f"{HELD_OUT}_hi"),
                "delta_pass@1": _value(final, "delta_pass@1"),
                "delta_pass@1_lo": _value(final, "delta_pass@1_lo"),
                "delta_pass@1_hi": _value(final, "delta_pass@1_hi"),
                "tasks": tasks,
                "samples_per_task": rollouts / tasks if tasks else math.nan,
                **times,
                "eval_wall_s": eval_s,
                "note": "; ".join(notes),
                "path": str(run.path),
            }
        )
    return rows


def learning_curve_figure(runs: Sequence[RunData]) -> Figure:
    """Left: training reward per optimizer step; right: held-out pass@1 of the base model (step 0) and every
    checkpoint with its 95% bootstrap interval. One line per (run, harness), the same color in both panels;
    negative controls dashed. Rates on a fixed 0-100% axis, steps on whole-number ticks."""
    fig = Figure(figsize=(11.0, 4.2), dpi=120, layout="constrained")
    train_ax, eval_ax = fig.subplots(1, 2, sharex=True)
    colors = iter(f"C{i}" for i in range(10_000))
    evaluated = False
    rewards: list[float] = []
    for run in runs:
        for harness in run.harnesses:
            color, style = next(colors), "--" if run.negative_control else "-"
            label = run.label(harness)
            reward = run.curves[(run.curves["harness"] == harness) & (run.curves["metric"] == TRAIN_REWARD)]
            reward = reward.sort_values("step")
            train_ax.plot(reward["step"], reward["value"], marker="o", color=color, linestyle=style, label=label)
            rewards.extend(reward["value"].tolist())
            native = _native(run.summary, harness)
            if len(native):
                evaluated = True
                y = native[HELD_OUT].astype(float)
                yerr = error_bars(y, native.get(f"{HELD_OUT}_lo"), native.get(f"{HELD_OUT}_hi"))
                eval_ax.errorbar(
                    native["step"], y, yerr=yerr, marker="o", capsize=3, color=color, linestyle=style, label=label
                )
    train_ax.set_title("training reward per step (mean over all scored groups)")
    train_ax.set_xlabel("optimizer step")
    train_ax.set_ylabel(TRAIN_REWARD)
    reward_axis(train_ax, rewards)
    eval_ax.set_title("held-out pass@1 (95% bootstrap CI)")
    eval_ax.set_xlabel("checkpoint step (0 = base model)")
    eval_ax.set_ylabel("pass@1")
    rate_axis(eval_ax)
    for ax in (train_ax, eval_ax):
        step_axis(ax)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    if not evaluated:
        eval_ax.text(
            0.5,
            0.5,
            "not evaluated yet:\npython eval.py run=RUN",
            ha="center",
            va="center",
            transform=eval_ax.transAxes,
        )
    if not rewards:
        train_ax.text(0.5, 0.5, "no optimizer step logged yet", ha="center", va="center", transform=train_ax.transAxes)
    return fig
