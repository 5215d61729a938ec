"""The evaluation's outputs: ``summary.csv``, the markdown table and the PNG plots.

The table is shaped like the study's: one block per harness, the base model first, then each checkpoint
with its change against the base row (pass@1 in points, tool calls per solved task on the tasks both solved).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from harness_rl.analysis.axes import style_axes
from harness_rl.analysis.plots import error_bars
from harness_rl.eval.metrics import BASE

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOTS = {
    "pass_at_1.png": ("pass@1", "pass@1 (held-out tasks)"),
    "tool_calls_solved.png": ("tool_calls_solved", "tool calls per solved task"),
}


def _pct(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def _num(value: float, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _signed(value: float, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else f"{scale * value:+.{digits}f}"


def markdown_table(summary: pd.DataFrame) -> str:
    """The summary as a markdown table: harness x checkpoint, base row first, with the change against it."""
    header = [
        "harness",
        "checkpoint",
        "pass@1 % (95% CI)",
        "Δ pass@1 (pts, 95% CI)",
        "tool calls / solved",
        "Δ tool calls (both solved)",
        "tokens / rollout",
        "blocked",
        "unscorable",
        "rollouts",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in summary.to_dict("records"):
        base = row["checkpoint"] == BASE
        pass1 = f"{_pct(row['pass@1'])} ({_pct(row['pass@1_lo'])}-{_pct(row['pass@1_hi'])})"
        if base:
            delta = delta_calls = ""
        else:
            delta = (
                f"{_signed(row.get('delta_pass@1', math.nan), 100)} "
                f"({_signed(row.get('delta_pass@1_lo', math.nan), 100)}, "
                f"{_signed(row.get('delta_pass@1_hi', math.nan), 100)})"
            )
            both = row.get("tool_calls_common", math.nan) - row.get("base_tool_calls_common", math.nan)
            delta_calls = f"{_signed(both, digits=2)} (n={int(row.get('common_solved_tasks', 0) or 0)})"
        cells = [
            row["harness"],
            row["checkpoint"],
            pass1,
            delta,
            _num(row["tool_calls_solved"], 2),
            delta_calls,
            _num(row["generated_tokens"], 0),
            str(int(row["blocked"])),
            str(int(row["unscorable"])),
            str(int(row["rollouts"])),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def metric_figure(summary: pd.DataFrame, column: str, title: str) -> Figure:
    """One line per harness over checkpoint steps (the base model at step 0), with 95% CI error bars.

    Only adapters evaluated in their own harness are drawn (cross-harness rows are in the table).
    """
    from matplotlib.figure import Figure  # the object API: no pyplot state, no backend switch in notebooks

    fig = Figure(figsize=(6.4, 4.0), dpi=120)
    ax = fig.subplots()
    native = summary[(summary["checkpoint"] == BASE) | (summary["trained_harness"] == summary["harness"])]
    for harness, rows in native.groupby("harness", sort=True):
        rows = rows.sort_values("step")
        y = rows[column].astype(float)
        yerr = error_bars(y, rows.get(f"{column}_lo"), rows.get(f"{column}_hi"))
        ax.errorbar(rows["step"], y, yerr=yerr, marker="o", capsize=3, label=str(harness))
    ax.set_xlabel("checkpoint step (0 = base model)")
    ax.set_ylabel(title)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    style_axes(ax, column)  # pass@1 on a fixed 0-100% axis, whole-number checkpoint steps
    ax.legend(title="harness")
    fig.tight_layout()
    return fig


def plot_metric(summary: pd.DataFrame, column: str, title: str, path: Path) -> Path:
    """``metric_figure`` written to ``path`` as PNG."""
    metric_figure(summary, column, title).savefig(path)
    return path


def write_report(summary: pd.DataFrame, out_dir: Path) -> dict[str, Path]:
    """Write ``summary.csv``, ``table.md`` and the PNG plots into ``out_dir``; returns their paths by name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"summary.csv": out_dir / "summary.csv", "table.md": out_dir / "table.md"}
    summary.to_csv(paths["summary.csv"], index=False)
    paths["table.md"].write_text(markdown_table(summary), encoding="utf-8")
    for name, (column, title) in PLOTS.items():
        paths[name] = plot_metric(summary, column, title, out_dir / name)
    return paths
