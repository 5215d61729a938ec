"""The evaluation report: a markdown table with the base row first and one row per (checkpoint, harness),
summary.csv, PNG plots, and one tracking record per checkpoint step."""

from __future__ import annotations

import pandas as pd
import pytest
from PIL import Image

from harness_rl.eval.metrics import BASE, summarize
from harness_rl.eval.report import markdown_table, write_report
from harness_rl.eval.tracking import step_records


def results() -> pd.DataFrame:
    rows = []
    for harness in ("pi", "hermes"):
        for checkpoint, trained, step in ((BASE, None, 0), ("pi/step_1", "pi", 1), ("pi/step_2", "pi", 2),
                                          ("hermes/step_1", "hermes", 1), ("hermes/step_2", "hermes", 2)):  # fmt: skip
            for i, task in enumerate(("t1", "t2", "t3", "t4")):
                rows.append({"checkpoint": checkpoint, "trained_harness": trained, "step": step,
                             "harness": harness, "task_id": task, "sample": 0, "solved": i < step + 1,
                             "unscorable": None, "tool_calls": 5 - step, "generated_tokens": 100, "blocked": 0,
                             "seconds": 2.0})  # fmt: skip
    return pd.DataFrame(rows)


def table_rows(table: str) -> list[list[str]]:
    lines = [line for line in table.strip().splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_table_has_base_row_then_each_checkpoint_per_harness(tmp_path):
    summary = summarize(results())
    rows = table_rows(markdown_table(summary))
    assert [(r[0], r[1]) for r in rows] == [
        ("hermes", "base"), ("hermes", "hermes/step_1"), ("hermes", "hermes/step_2"), ("hermes", "pi/step_1"),
        ("hermes", "pi/step_2"), ("pi", "base"), ("pi", "hermes/step_1"), ("pi", "hermes/step_2"),
        ("pi", "pi/step_1"), ("pi", "pi/step_2")]  # fmt: skip
    by_name = {(r[0], r[1]): r for r in rows}
    assert by_name[("pi", "base")][2].startswith("25.0 (") and by_name[("pi", "base")][3] == ""
    assert by_name[("pi", "pi/step_2")][2].startswith("75.0 (")
    assert by_name[("pi", "pi/step_2")][3].startswith("+50.0 (")
    assert by_name[("pi", "pi/step_2")][5] == "-2.00 (n=1)"  # 3 calls vs 5 on the one task both solved


def test_report_files_and_plots(tmp_path):
    paths = write_report(summarize(results()), tmp_path)
    assert set(paths) == {"summary.csv", "table.md", "pass_at_1.png", "tool_calls_solved.png"}
    csv = pd.read_csv(paths["summary.csv"])
    assert len(csv) == 10 and {"pass@1", "pass@1_lo", "pass@1_hi", "delta_pass@1"} <= set(csv.columns)
    for name in ("pass_at_1.png", "tool_calls_solved.png"):
        with Image.open(paths[name]) as image:
            assert image.format == "PNG" and image.width > 300 and image.height > 200
            assert len(image.convert("L").getcolors(maxcolors=1 << 16)) > 10  # something was drawn


def test_step_records_key_native_and_cross_harness_rows():
    records = step_records(summarize(results()))
    assert list(records) == [0, 1, 2]
    assert records[0]["eval/pi/pass@1"] == 0.25
    assert records[2]["eval/pi/pass@1"] == 0.75
    assert "eval/pi/from_hermes/pass@1" in records[2]


def test_pass_at_1_plot_has_a_fixed_percent_axis_and_integer_steps():
    # The bug this guards: a pass@1 near 0 was drawn on a -0.04..0.04 axis with steps ticked every 0.25.
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    from harness_rl.analysis.axes import RATE_LIMITS
    from harness_rl.eval.report import metric_figure

    flat = results().assign(solved=False)
    (ax,) = metric_figure(summarize(flat), "pass@1", "pass@1").axes
    assert ax.get_ylim() == pytest.approx(RATE_LIMITS)
    assert isinstance(ax.yaxis.get_major_formatter(), PercentFormatter)
    assert isinstance(ax.xaxis.get_major_locator(), MaxNLocator)
    assert all(float(t).is_integer() for t in ax.get_xticks())
    (calls,) = metric_figure(summarize(results()), "tool_calls_solved", "tool calls").axes
    assert not isinstance(calls.yaxis.get_major_formatter(), PercentFormatter)  # a count, not a rate
