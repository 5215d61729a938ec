"""Figures for the analysis notebooks: training curves per harness, one session's graph, eval rows.

Each function returns a ``matplotlib.figure.Figure`` built with the object API (no pyplot state), which a
notebook shows as an image when it is a cell's last value and which ``fig.savefig`` writes anywhere.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence

import pandas as pd
from matplotlib.figure import Figure

from harness_rl.analysis.axes import rate_axis, rate_kind, style_axes

#: The training curves the study reads first.
TRAINING_METRICS = (
    "reward/mean",
    "reward/pass_rate",
    "rollout/tool_calls_mean",
    "safety/blocked",
    "staleness/mean",
    "rollout/sampled_tokens",
)

#: What RL practitioners read to tell whether the policy learns: entropy at the sampled positions, KL to the
#: behaviour policy (k1 and k3 estimators, from the captured log-probs), clip fraction, gradient norm, advantage
#: statistics, the fraction of groups with reward variance, and where a rollout's time goes. Glob patterns
#: expand to every logged metric they match (``expand_metrics``); one that matches nothing is a "not logged" panel.
LEARNING_DIAGNOSTICS = (
    "train/entropy*",
    "train/kl_behaviour_k1",
    "train/kl_behaviour_k3",
    "train/*clip*fraction",
    "train/grad_norm",
    "adv/*",
    "batch/groups_with_variance_fraction",
    "time/rollout_*_s",
)


def expand_metrics(curves: pd.DataFrame, patterns: Sequence[str]) -> list[str]:
    """The metrics of ``curves`` matching each glob pattern, in pattern order (sorted within one pattern).

    A pattern that matches nothing is kept as it is, so its panel says "not logged" instead of vanishing.
    """
    logged = sorted(set(curves["metric"])) if "metric" in curves else []
    out: list[str] = []
    for pattern in patterns:
        matches = fnmatch.filter(logged, pattern) if any(ch in pattern for ch in "*?[") else []
        for metric in matches or [pattern]:
            if metric not in out:
                out.append(metric)
    return out


def error_bars(values: pd.Series, lo: pd.Series | None, hi: pd.Series | None) -> list[pd.Series] | None:
    """``yerr`` for ``Axes.errorbar`` from an interval's bounds: distances below and above each value.

    None when there is no interval; a missing bound (NaN) draws no bar on that side.
    """
    if lo is None or hi is None:
        return None
    values = values.astype(float)
    return [(values - lo.astype(float)).clip(lower=0).fillna(0), (hi.astype(float) - values).clip(lower=0).fillna(0)]


def plot_training_curves(curves: pd.DataFrame, metrics: Sequence[str] = TRAINING_METRICS) -> Figure:
    """One panel per metric, one line per harness over optimizer steps (``training_curves`` input).

    ``metrics`` may hold glob patterns (``adv/*``), expanded by ``expand_metrics``. Rates are drawn on 0-100%.
    """
    metrics = expand_metrics(curves, metrics)
    cols = 3
    rows = max(1, math.ceil(len(metrics) / cols))
    fig = Figure(figsize=(4.2 * cols, 3.0 * rows), dpi=100, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, metric in zip(axes, metrics, strict=False):
        selected = curves[curves["metric"] == metric]
        for harness, line in selected.groupby("harness", sort=True):
            ax.plot(line["step"], line["value"], marker="o", label=str(harness))
        ax.set_title(metric)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        style_axes(ax, metric, values=selected["value"].tolist())
        if selected.empty:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        else:
            ax.legend(fontsize="small")
    for ax in axes[len(metrics) :]:
        ax.set_visible(False)
    return fig


def plot_session(turns: pd.DataFrame, title: str = "") -> Figure:
    """One session's graph: a bar per engine call (prompt and generated tokens), its parent edge, tool calls
    above it and blocked calls marked in red with their rule (``trace_turns`` input)."""
    fig = Figure(figsize=(max(6.0, 0.9 * len(turns) + 3), 4.0), dpi=100, layout="constrained")
    ax = fig.subplots()
    if turns.empty:
        ax.text(0.5, 0.5, "no engine call in this session", ha="center", va="center", transform=ax.transAxes)
        return fig
    x = turns["turn"]
    ax.bar(x, turns["prompt_tokens"], color="#9db4d0", label="prompt tokens")
    ax.bar(x, turns["completion_tokens"], bottom=turns["prompt_tokens"], color="#2b6cb0", label="generated tokens")
    top = (turns["prompt_tokens"] + turns["completion_tokens"]).max()
    for row in turns.itertuples():
        height = row.prompt_tokens + row.completion_tokens
        if row.parent is not None and not pd.isna(row.parent):  # the call whose reply this prompt extends
            ax.annotate(
                "", xy=(row.turn, height), xytext=(row.parent, height), arrowprops={"arrowstyle": "->", "color": "gray"}
            )
        label = f"{row.tool_calls} call(s)" + (f"\n{row.tools}" if row.tools else "")
        ax.text(row.turn, height + 0.02 * top, label, ha="center", va="bottom", fontsize=7)
        if row.blocked:
            ax.scatter(
                [row.turn],
                [height + 0.15 * top],
                marker="X",
                color="red",
                s=80,
                label="blocked" if "blocked" not in ax.get_legend_handles_labels()[1] else None,
            )
            ax.text(row.turn, height + 0.2 * top, row.blocked_rules, color="red", ha="center", fontsize=7)
    ax.set_ylim(0, top * 1.35)
    ax.set_xticks(list(x))  # one whole-number tick per turn
    ax.set_xlabel("engine call (turn)")
    ax.set_ylabel("tokens")
    ax.set_title(title or "session graph")
    ax.legend(fontsize="small", loc="upper left")
    return fig


def plot_eval_rows(summary: pd.DataFrame, column: str = "pass@1") -> Figure:
    """A bar per (harness, checkpoint) row of the eval summary with its 95% interval."""
    fig = Figure(figsize=(max(6.0, 0.7 * len(summary) + 2), 3.8), dpi=100, layout="constrained")
    ax = fig.subplots()
    if summary.empty:
        ax.text(0.5, 0.5, "no evaluation in this run yet", ha="center", va="center", transform=ax.transAxes)
        return fig
    labels = [f"{h}\n{c}" for h, c in zip(summary["harness"], summary["checkpoint"], strict=True)]
    values = summary[column].astype(float)
    err = error_bars(values, summary.get(f"{column}_lo"), summary.get(f"{column}_hi"))
    colors = ["#999999" if c == "base" else "#2b6cb0" for c in summary["checkpoint"]]
    ax.bar(range(len(summary)), values.fillna(0), yerr=err, capsize=3, color=colors)
    ax.set_xticks(range(len(summary)), labels, fontsize=7)
    ax.set_ylabel(column)
    ax.set_title(f"{column} per (harness, checkpoint); grey = base model")
    ax.grid(axis="y", alpha=0.3)
    kind = rate_kind(column)
    if kind is not None:  # the x-axis names rows, not steps: only the rate rule applies
        rate_axis(ax, signed=kind == "signed_rate")
    return fig
