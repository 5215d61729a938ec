"""The analysis loaders read a run folder into pandas (metrics in long form, a session's turns with blocked
calls and their explanations, cost), and the notebooks are stored without outputs and name their run by
$HARNESS_RL_RUN with a clear error when it is unset."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from harness_rl.analysis import load_run, run_dir_from_env, trace_turns
from harness_rl.analysis.cost import cost_table
from harness_rl.analysis.plots import plot_eval_rows, plot_session, plot_training_curves
from harness_rl.proxy.export import write_trace_jsonl

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "analysis").glob("*.ipynb"))


def make_run(tmp_path: Path) -> Path:
    (tmp_path / "config.yaml").write_text("harness:\n  mix: [pi, hermes]\n")
    (tmp_path / "metadata.json").write_text(json.dumps({"model": "m"}))
    lines = []
    for step in (1, 2):
        for harness in ("pi", "hermes"):
            lines.append({"step": step, "time": 1000.0 + 1800 * step, "harness": harness,
                          f"{harness}/reward/mean": 0.1 * step, f"{harness}/rollout/count": 8,
                          f"{harness}/rollout/sampled_tokens": 500, f"{harness}/policy/adapter": f"{harness}-v{step}",
                          f"{harness}/time/train_step_s": 60.0})  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 3, "ti')
    return tmp_path


def test_metrics_in_long_form_per_harness(tmp_path):
    run = load_run(make_run(tmp_path))
    assert run.harnesses == ["pi", "hermes"] and len(run.metrics) == 4  # the torn last line is skipped
    curves = run.curves
    reward = curves[(curves["harness"] == "pi") & (curves["metric"] == "reward/mean")]
    assert list(reward["step"]) == [1, 2] and list(reward["value"]) == pytest.approx([0.1, 0.2])
    assert "policy/adapter" not in set(curves["metric"])  # not numeric
    assert plot_training_curves(curves).axes


def test_session_turns_show_blocked_calls_with_explanations(tmp_path):
    trace = {"key": "k", "adapter": "pi-v1", "purpose": "train", "requests": 2, "sequences": [], "failures": [],
             "nodes": [
                 {"id": 0, "parent": None, "prompt_token_ids": [1, 2, 3], "completion_token_ids": [4, 5],
                  "tool_calls": [{"function": {"name": "bash"}}], "blocked": [], "t_start": 0.0, "t_end": 1.5},
                 {"id": 1, "parent": 0, "prompt_token_ids": [1, 2, 3, 4, 5, 6], "completion_token_ids": [7],
                  "tool_calls": [{"function": {"name": "bash"}}],
                  "blocked": [{"rule": "destructive", "explanation": "rm -rf / would wipe the machine"}]},
             ]}  # fmt: skip
    path = tmp_path / "trace.jsonl"
    write_trace_jsonl(path, trace)
    from harness_rl.analysis import load_trace

    turns = trace_turns(load_trace(path))
    assert list(turns["prompt_tokens"]) == [3, 6] and list(turns["completion_tokens"]) == [2, 1]
    assert list(turns["tools"]) == ["bash", "bash"] and list(turns["blocked"]) == [0, 1]
    assert turns.loc[1, "explanations"] == "rm -rf / would wipe the machine"
    assert turns.loc[0, "seconds"] == 1.5
    assert plot_session(turns).axes


def test_cost_table_per_harness(tmp_path):
    table = cost_table(load_run(make_run(tmp_path)), devices=2, usd_per_device_hour=3.0).set_index("what")
    assert table.loc["train pi", "rollouts"] == 16 and table.loc["train pi", "sampled_tokens"] == 1000
    assert table.loc["train pi", "wall_h"] == pytest.approx(0.5)
    assert table.loc["train pi", "usd"] == pytest.approx(0.5 * 2 * 3.0)


def test_empty_eval_draws_a_placeholder(tmp_path):
    run = load_run(make_run(tmp_path))
    assert run.eval_summary.empty and plot_eval_rows(run.eval_summary).axes


def test_run_dir_from_env_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.delenv("HARNESS_RL_RUN", raising=False)
    with pytest.raises(RuntimeError, match="set HARNESS_RL_RUN"):
        run_dir_from_env()
    monkeypatch.setenv("HARNESS_RL_RUN", str(tmp_path))
    with pytest.raises(RuntimeError, match="not a run folder"):
        run_dir_from_env()
    make_run(tmp_path)
    assert run_dir_from_env() == tmp_path


def test_notebooks_are_stored_without_outputs_and_read_the_env_var():
    assert {p.name for p in NOTEBOOKS} >= {"training_curves.ipynb", "evaluation.ipynb", "rollout_explorer.ipynb",
                                           "cost.ipynb"}  # fmt: skip
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.outputs == [] and c.execution_count is None for c in code), path.name
        assert "run_dir_from_env()" in code[0].source, path.name


def test_a_session_without_engine_calls_has_an_empty_turn_table():
    turns = trace_turns({"nodes": []})
    assert turns.empty and "blocked" in turns.columns
    assert plot_session(turns).axes


@pytest.mark.parametrize("name", ["training_curves.ipynb", "cost.ipynb"])
def test_training_notebooks_run_on_a_run_with_and_without_diagnostics(tmp_path, monkeypatch, name):
    from nbclient import NotebookClient

    run = make_run(tmp_path)
    metrics = run / "metrics.jsonl"
    text = metrics.read_text()
    step = {
        "step": 3,
        "time": 6400.0,
        "harness": "pi",
        "pi/reward/mean": 0.3,
        "pi/train/entropy": 1.5,
        "pi/adv/mean": 0.0,
        "pi/train/clip_fraction": 0.1,
        "pi/time/rollout_generation_s": 4.0,
    }
    metrics.write_text(text[: text.rfind("\n") + 1] + json.dumps(step) + "\n")  # diagnostics at step 3 only
    monkeypatch.setenv("HARNESS_RL_RUN", str(run))
    notebook = nbformat.read(ROOT / "analysis" / name, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    images = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert images  # the figures were drawn


def test_evaluation_notebook_runs_and_draws_the_learning_curve(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    from harness_rl.eval.metrics import summarize
    from harness_rl.eval.report import write_report

    run = make_run(tmp_path)
    records = [
        {
            "checkpoint": "base" if step == 0 else f"pi/step_{step}",
            "trained_harness": None if step == 0 else "pi",
            "step": step,
            "harness": "pi",
            "task_id": f"t{i}",
            "sample": 0,
            "solved": i < step + 1,
            "unscorable": None,
            "tool_calls": 3,
            "generated_tokens": 100,
            "blocked": 0,
            "seconds": 2.0,
            "time": 9000.0 + 10 * i,
        }
        for step in (0, 1, 2)
        for i in range(4)
    ]
    (run / "eval").mkdir()
    (run / "eval" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_report(summarize(pd.DataFrame(records)), run / "eval")
    monkeypatch.setenv("HARNESS_RL_RUN", str(run))
    notebook = nbformat.read(ROOT / "analysis" / "evaluation.ipynb", as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    curve = next(c for c in notebook.cells if "learning_curve_figure" in c.source)
    assert any("image/png" in o.get("data", {}) for o in curve.outputs)
