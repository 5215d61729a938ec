"""``python -m harness_rl.analysis.report RUN... --out DIR`` turns training run folders and their evaluations into
learning_curve.png, results.md and results.csv with the numbers of eval/summary.csv, wall times from the run's
files, the negative control marked, and a run without an evaluation reported with a note instead of failing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.ticker import MaxNLocator, PercentFormatter
from PIL import Image

from harness_rl.analysis.axes import RATE_LIMITS
from harness_rl.analysis.learning import learning_curve_figure, read_run, result_rows
from harness_rl.analysis.report import main

HARNESS = "mini_swe_agent"
STARTED = 1_800_000_000.0  # 2027-01-15T08:00:00+0000


def make_run(
    root: Path,
    name: str,
    *,
    seed: int,
    rewards: list[float],
    passes: list[float] | None,
    sign: float = 1.0,
) -> Path:
    """A run folder as train.py and eval.py write it: 3 optimizer steps, 10 minutes apart after a 1-minute engine
    start; when ``passes`` is given, an evaluation of base + each step (pass@1 per step, intervals +-0.1)."""
    run = root / "cpu_learning" / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        f"seed: {seed}\ntrainer:\n  advantage_sign: {sign}\nharness:\n  mix: [{HARNESS}]\n", encoding="utf-8"
    )
    (run / "metadata.json").write_text(json.dumps({"started": "2027-01-15T08:00:00+0000"}))
    (run / "train.log").write_text(
        "[2027-01-15 09:00:00,000][harness_rl.launch.train_run][INFO] - run folder: x\n"
        "[2027-01-15 09:01:00,000][harness_rl.engine.server][INFO] - vLLM ready at http://127.0.0.1:1 after 60.0 s\n"
    )  # local time one hour ahead of UTC: only differences count
    lines = [
        {
            "step": step,
            "time": STARTED + 60 + 600 * step,
            "harness": HARNESS,
            f"{HARNESS}/reward/mean": reward,
            f"{HARNESS}/reward/pass_rate": reward,
        }
        for step, reward in enumerate(rewards, start=1)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if passes is not None:
        rows = []
        for step, value in enumerate(passes):
            base = step == 0
            rows.append(
                {
                    "harness": HARNESS,
                    "checkpoint": "base" if base else f"{HARNESS}/step_{step}",
                    "trained_harness": None if base else HARNESS,
                    "step": step,
                    "tasks": 20,
                    "rollouts": 80,
                    "pass@1": value,
                    "pass@1_lo": value - 0.1,
                    "pass@1_hi": value + 0.1,
                    "delta_pass@1": None if base else value - passes[0],
                    "delta_pass@1_lo": None if base else value - passes[0] - 0.1,
                    "delta_pass@1_hi": None if base else value - passes[0] + 0.1,
                }
            )
        (run / "eval").mkdir()
        pd.DataFrame(rows).to_csv(run / "eval" / "summary.csv", index=False)
        cells = [{"time": STARTED + 5000 + 30 * i, "seconds": 20.0} for i in range(10)]
        (run / "eval" / "results.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cells))
    return run


@pytest.fixture
def runs(tmp_path) -> tuple[Path, Path]:
    learner = make_run(tmp_path, "seed0", seed=0, rewards=[0.2, 0.4, 0.6], passes=[0.25, 0.35, 0.40, 0.45])
    control = make_run(tmp_path, "control", seed=0, rewards=[0.2, 0.1, 0.0], passes=[0.25, 0.2, 0.1, 0.05], sign=-1)
    return learner, control


def table(md: str) -> list[list[str]]:
    lines = [line for line in md.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_cli_writes_png_md_and_csv_with_the_summary_numbers(runs, tmp_path, capsys):
    learner, control = runs
    out = tmp_path / "results"
    assert main([str(learner), str(control), "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {"learning_curve.png", "results.md", "results.csv"}

    csv = pd.read_csv(out / "results.csv").set_index("run")
    row = csv.loc["cpu_learning/seed0"]
    assert row["seed"] == 0 and not row["negative_control"] and row["final_checkpoint"] == f"{HARNESS}/step_3"
    assert row["base_pass@1"] == pytest.approx(0.25) and row["final_pass@1"] == pytest.approx(0.45)
    assert [row["delta_pass@1"], row["delta_pass@1_lo"], row["delta_pass@1_hi"]] == pytest.approx([0.2, 0.1, 0.3])
    assert row["tasks"] == 20 and row["samples_per_task"] == 4 and row["train_steps"] == 3
    assert row["train_wall_s"] == pytest.approx(60 + 1800)  # start to the last step
    assert row["engine_ready_s"] == pytest.approx(60) and row["train_after_engine_s"] == pytest.approx(1800)
    assert row["eval_wall_s"] == pytest.approx(9 * 30 + 20)  # first cell's start to the last cell's end
    assert row["final_train_reward"] == pytest.approx(0.6)
    assert bool(csv.loc["cpu_learning/control", "negative_control"])
    assert csv.loc["cpu_learning/control", "delta_pass@1"] == pytest.approx(-0.2)

    md = (out / "results.md").read_text()
    header, _, *rows = table(md)
    by_run = {r[0]: dict(zip(header, r, strict=True)) for r in rows}
    learned = by_run["cpu_learning/seed0"]
    assert learned["base pass@1 % [95% CI]"] == "25.0 [15.0, 35.0]"
    assert learned["final pass@1 % [95% CI]"] == f"45.0 [35.0, 55.0] ({HARNESS}/step_3)"
    assert learned["Δ pass@1 pts [95% CI]"] == "+20.0 [+10.0, +30.0]"
    assert learned["negative control"] == "no" and learned["seed"] == "0"
    assert learned["tasks"] == "20" and learned["samples / task"] == "4"
    assert learned["train wall min"] == "31.0" and learned["train min after engine ready"] == "30.0"
    assert by_run["cpu_learning/control"]["negative control"].startswith("yes")
    assert by_run["cpu_learning/control"]["Δ pass@1 pts [95% CI]"] == "-20.0 [-30.0, -10.0]"
    assert f"`python -m harness_rl.analysis.report {learner} {control} --out {out}`" in md

    with Image.open(out / "learning_curve.png") as image:
        assert image.format == "PNG" and image.width > 800
    assert "wrote" in capsys.readouterr().out


def test_learning_curve_panels(runs):
    learner, control = runs
    train_ax, eval_ax = learning_curve_figure([read_run(learner), read_run(control)]).axes
    # Right: held-out pass@1 of base (step 0) and each checkpoint, one line per run, on the fixed 0-100% axis.
    eval_lines = [bars.lines[0] for bars in eval_ax.containers]  # the data line of each errorbar
    assert list(eval_lines[0].get_ydata()) == pytest.approx([0.25, 0.35, 0.40, 0.45])
    assert list(eval_lines[1].get_ydata()) == pytest.approx([0.25, 0.2, 0.1, 0.05])
    lower_caps = eval_ax.containers[0].lines[1][0].get_ydata()
    assert list(lower_caps) == pytest.approx([0.15, 0.25, 0.30, 0.35])  # the bootstrap interval's lower ends
    assert list(eval_lines[0].get_xdata()) == [0, 1, 2, 3]
    assert eval_lines[1].get_linestyle() == "--"  # the negative control
    assert eval_ax.get_ylim() == pytest.approx(RATE_LIMITS)
    assert isinstance(eval_ax.yaxis.get_major_formatter(), PercentFormatter)
    # Left: the training reward of every step.
    assert [list(line.get_ydata()) for line in train_ax.get_lines()] == [[0.2, 0.4, 0.6], [0.2, 0.1, 0.0]]
    for ax in (train_ax, eval_ax):
        assert isinstance(ax.xaxis.get_major_locator(), MaxNLocator)
        assert all(float(t).is_integer() for t in ax.get_xticks())
    labels = eval_ax.get_legend_handles_labels()[1]
    assert labels == ["seed 0", "seed 0 (negative control)"]


def test_a_run_without_evaluation_is_reported_with_its_training_curve_and_a_note(tmp_path):
    run = make_run(tmp_path, "pending", seed=1, rewards=[0.1, 0.3], passes=None)
    (row,) = result_rows(read_run(run))
    assert row["train_steps"] == 2 and math.isnan(row["delta_pass@1"]) and row["final_checkpoint"] is None
    assert "no eval/summary.csv" in row["note"] and f"python eval.py run={run}" in row["note"]
    out = tmp_path / "out"
    assert main([str(run), "--out", str(out)]) == 0
    md = (out / "results.md").read_text()
    assert "not evaluated" in md and "- [-, -]" in md
    train_ax, eval_ax = learning_curve_figure([read_run(run)]).axes
    assert [list(line.get_ydata()) for line in train_ax.get_lines()] == [[0.1, 0.3]]
    assert any("not evaluated" in t.get_text() for t in eval_ax.texts)


def test_a_trainer_stopped_on_flat_groups_is_noted_and_its_steps_counted(tmp_path):
    run = make_run(tmp_path, "stalled", seed=1, rewards=[0.2, 0.0], passes=[0.25, 0.2, 0.0], sign=-1)
    # What train_run logs when trainer.stop_after_uninformative_groups ends the trainer: at its last step.
    stop = {"step": 2, "time": STARTED + 1500, "harness": HARNESS, f"{HARNESS}/stopped/uninformative_groups": 12}
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(stop) + "\n")
    (row,) = result_rows(read_run(run))
    assert row["train_steps"] == 2 and row["final_train_reward"] == 0.0
    assert row["note"] == "stopped after step 2: 12 groups in a row without reward variance"


def test_a_folder_that_is_no_run_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--out", str(tmp_path / "out")])
    assert "no config.yaml" in capsys.readouterr().err


def test_readme_block_is_replaced_and_the_prose_kept(runs, tmp_path, capsys):
    learner, _ = runs
    readme = tmp_path / "experiment" / "README.md"
    readme.parent.mkdir()
    readme.write_text(
        "# Experiment\n\nProse.\n\n<!-- report:begin -->\nold table\n<!-- report:end -->\n\nMore prose.\n"
    )
    out = tmp_path / "experiment" / "results"
    assert main([str(learner), "--out", str(out), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# Experiment\n\nProse.\n") and text.endswith("<!-- report:end -->\n\nMore prose.\n")
    assert "old table" not in text and "+20.0 [+10.0, +30.0]" in text
    assert "![learning curve](results/learning_curve.png)" in text  # relative to the README
    assert main([str(learner), "--out", str(out), "--readme", str(readme)]) == 0
    assert readme.read_text() == text  # idempotent


def test_readme_without_markers_is_a_clear_error(runs, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    with pytest.raises(SystemExit):
        main([str(runs[0]), "--out", str(tmp_path / "out"), "--readme", str(readme)])
    assert "<!-- report:begin -->" in capsys.readouterr().err and readme.read_text() == "# no markers\n"
