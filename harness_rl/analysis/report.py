"""The learning-curve report of one or more training runs: a figure, a markdown table and a CSV, by command.

    python -m harness_rl.analysis.report RUN [RUN ...] --out DIR

Each RUN is a training run folder (``config.yaml``, ``metrics.jsonl``; ``eval/summary.csv`` once
``python eval.py run=RUN`` has run). DIR receives:

- ``learning_curve.png``: training reward per step and held-out pass@1 per checkpoint, one line per seed;
- ``results.md``: one row per (run, harness), then the command that wrote it (so the README's table is
  reproduced, never typed);
- ``results.csv``: the same rows, rates as fractions (as in ``eval/summary.csv``), times in seconds.

``--readme FILE`` also puts the table and the figure into FILE, between the lines ``<!-- report:begin -->`` and
``<!-- report:end -->`` (an experiment's README keeps its prose; its numbers come from here).

A run without an evaluation is reported with its training curve only, and its row says how to evaluate it.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness_rl.analysis.learning import learning_curve_figure, read_run, result_rows

#: The command as a user types it (what ``results.md`` names as its source).
COMMAND = "python -m harness_rl.analysis.report"


def _pct(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def _pts(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{100 * value:+.1f}"


def _minutes(seconds: float) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds / 60:.1f}"


def _count(value: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a markdown table: pass@1 in percent, its change in points with the 95% interval, minutes."""
    header = [
        "run",
        "harness",
        "seed",
        "negative control",
        "base pass@1 % [95% CI]",
        "final pass@1 % [95% CI]",
        "Δ pass@1 pts [95% CI]",
        "tasks",
        "samples / task",
        "train steps",
        "train wall min",
        "train min after engine ready",
        "eval wall min",
        "note",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        final = f"{_pct(row['final_pass@1'])} [{_pct(row['final_pass@1_lo'])}, {_pct(row['final_pass@1_hi'])}]"
        if row["final_checkpoint"]:
            final += f" ({row['final_checkpoint']})"
        cells = [
            row["run"],
            row["harness"],
            str(row["seed"]),
            "yes (advantage ×-1)" if row["negative_control"] else "no",
            f"{_pct(row['base_pass@1'])} [{_pct(row['base_pass@1_lo'])}, {_pct(row['base_pass@1_hi'])}]",
            final,
            f"{_pts(row['delta_pass@1'])} [{_pts(row['delta_pass@1_lo'])}, {_pts(row['delta_pass@1_hi'])}]",
            _count(row["tasks"]),
            _count(row["samples_per_task"]),
            str(row["train_steps"]),
            _minutes(row["train_wall_s"]),
            _minutes(row["train_after_engine_s"]),
            _minutes(row["eval_wall_s"]),
            row["note"],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- report:begin -->", "<!-- report:end -->"


def report_text(rows: Sequence[dict[str, Any]], figure: str, command: str) -> str:
    """The table, what its numbers mean, the figure (``figure``: its path relative to the text) and the command."""
    return (
        markdown_table(rows)
        + "\nRates in percent of held-out tasks (pass@1 averaged over samples per task); Δ is final checkpoint minus"
        " base in points, its 95% interval a percentile bootstrap over tasks (eval/summary.csv). Train wall time:"
        " from the run's start to its last optimizer step.\n"
        + f"\n![learning curve]({figure})\n"
        + f"\nProduced by: `{command}`\n"
    )


def update_readme(readme: Path, text: str) -> None:
    """Replace what lies between the report markers of ``readme`` by ``text`` (written atomically).

    Raises:
        ValueError: The file lacks one of the markers, or has them out of order.
    """
    content = readme.read_text(encoding="utf-8")
    start, end = content.find(BEGIN), content.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{readme}: needs a line {BEGIN} followed by a line {END} where the report goes")
    updated = content[: start + len(BEGIN)] + "\n" + text + content[end:]
    tmp = readme.with_name(readme.name + ".tmp")
    tmp.write_text(updated, encoding="utf-8")
    os.replace(tmp, readme)


def write_report(
    runs: Sequence[str | Path], out_dir: Path, *, command: str | None = None, readme: Path | None = None
) -> dict[str, Path]:
    """Write ``learning_curve.png``, ``results.md`` and ``results.csv`` for ``runs`` into ``out_dir``.

    Args:
        runs: Training run folders.
        out_dir: Created when missing.
        command: The command line named under the table (the CLI passes its own).
        readme: A markdown file whose report block (between the markers) gets the table and figure too.

    Returns:
        The written paths by file name.
    """
    data = [read_run(run) for run in runs]
    rows = [row for run in data for row in result_rows(run)]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / name for name in ("learning_curve.png", "results.md", "results.csv")}
    learning_curve_figure(data).savefig(paths["learning_curve.png"])
    command = command or " ".join([COMMAND, *(shlex.quote(str(r)) for r in runs), "--out", shlex.quote(str(out_dir))])
    paths["results.md"].write_text(report_text(rows, "learning_curve.png", command), encoding="utf-8")
    pd.DataFrame(rows).to_csv(paths["results.csv"], index=False)
    if readme is not None:
        figure = os.path.relpath(paths["learning_curve.png"], Path(readme).resolve().parent)
        update_readme(Path(readme), report_text(rows, Path(figure).as_posix(), command))
        paths["readme"] = Path(readme)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI: parse, write the report, print what was written."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog=COMMAND,
        description="Learning-curve figure, results table (markdown and CSV) of training runs and their evaluations.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="training run folder (has config.yaml)")
    parser.add_argument("--out", required=True, type=Path, help="folder for learning_curve.png, results.md/.csv")
    parser.add_argument("--readme", type=Path, help=f"also put the report between {BEGIN} and {END} in this file")
    args = parser.parse_args(argv)
    command = " ".join([COMMAND, *(shlex.quote(a) for a in argv)])
    try:
        paths = write_report(args.runs, args.out.resolve(), command=command, readme=args.readme)
    except (FileNotFoundError, ValueError) as exc:
        parser.error(str(exc))
    for path in paths.values():
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
