"""Write the analysis notebooks (without outputs) from the cell sources below.

    python analysis/make_notebooks.py

Each notebook reads the run folder from $HARNESS_RL_RUN, e.g.
    HARNESS_RL_RUN=runs/smollm2-135m-mini_swe_agent/2026-11-29_10-00-00 jupyter lab analysis/
The notebooks are the source of truth once written; this script is how they were made (and how to regenerate
them after changing a cell here).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = """%matplotlib inline
from harness_rl.analysis import load_run, run_dir_from_env

run = load_run(run_dir_from_env())  # $HARNESS_RL_RUN: the run folder
print(run.path, run.metadata.get("model"), run.harnesses)"""

NOTEBOOKS = {
    "training_curves.ipynb": [
        "# Training curves per harness\nReward, pass rate, tool calls, blocked calls, staleness and tokens per "
        "optimizer step, one line per harness (from `metrics.jsonl`).",
        SETUP,
        """from harness_rl.analysis.plots import TRAINING_METRICS, plot_training_curves

curves = run.curves
plot_training_curves(curves, TRAINING_METRICS)""",
        """# The same numbers as a table: one row per (harness, step).
table = curves[curves["metric"].isin(TRAINING_METRICS)].pivot_table(
    index=["harness", "step"], columns="metric", values="value"
)
table""",
        """# Learning diagnostics: entropy at the sampled positions, KL to the behaviour policy (k1, k3 from the
# captured log-probs), clip fraction, gradient norm, advantage statistics (adv/*), the fraction of groups with
# reward variance, and per-phase rollout seconds (time/rollout_*_s). A panel says "not logged" when the run
# did not log that metric (an older run).
from harness_rl.analysis.plots import LEARNING_DIAGNOSTICS, expand_metrics

print(expand_metrics(curves, LEARNING_DIAGNOSTICS))
plot_training_curves(curves, LEARNING_DIAGNOSTICS)""",
        """# Trainer health: loss, clip fraction, gradient norm, engine/trainer log-prob agreement, step time.
HEALTH = ["train/loss", "train/clip_fraction", "train/grad_norm", "train/onpolicy_logprob_absdiff_max",
          "time/train_step_s", "time/wait_for_rollouts_s"]
plot_training_curves(curves, HEALTH)""",
    ],
    "evaluation.ipynb": [
        "# Evaluation over checkpoints\nThe table `python eval.py run=...` wrote (harness x checkpoint, base "
        "row first, change against it), its plots, and per-task results.",
        SETUP,
        """from IPython.display import Image, Markdown, display

if run.eval_summary.empty:
    raise RuntimeError(f"no evaluation in {run.path}: run  python eval.py run={run.path}")
display(Markdown((run.path / "eval" / "table.md").read_text()))""",
        """# Learning curve: training reward per step beside held-out pass@1 per checkpoint (95% bootstrap CI).
# For several runs (seeds, a negative control):  python -m harness_rl.analysis.report RUN [RUN ...] --out DIR
from harness_rl.analysis.learning import learning_curve_figure, read_run

learning_curve_figure([read_run(run.path)])""",
        """from harness_rl.analysis.plots import plot_eval_rows

plot_eval_rows(run.eval_summary, "pass@1")""",
        """for name in ("pass_at_1.png", "tool_calls_solved.png"):
    display(Image(filename=str(run.path / "eval" / name)))""",
        """# Per task: which rows solved what (mean over samples).
results = run.eval_results
results.pivot_table(index="task_id", columns=["harness", "checkpoint"], values="solved", aggfunc="mean")""",
        """# Unscorable rollouts and their reasons.
results.loc[results["unscorable"].notna(), ["checkpoint", "harness", "task_id", "unscorable"]]""",
    ],
    "rollout_explorer.ipynb": [
        "# Rollout explorer\nOne session's graph: its engine calls (turns), tokens, tool calls, and blocked "
        "calls with the explanation the model was shown. Set `PICK` to another row of `traces`.",
        SETUP,
        """from harness_rl.analysis import list_traces, load_trace, trace_turns
from harness_rl.analysis.plots import plot_session

traces = list_traces(run.path)
if traces.empty:
    raise RuntimeError(f"no trace.jsonl under {run.path / 'rollouts'}")
# Blocked calls per session (the first 200 sessions, to stay quick on a long run).
traces["blocked"] = [
    int(trace_turns(load_trace(p))["blocked"].sum()) if i < 200 else None for i, p in enumerate(traces["path"])
]
traces[["parts", "blocked"]].head(20)""",
        """# The first session with a blocked call if there is one, else the first session.
with_blocks = traces.index[traces["blocked"].fillna(0) > 0]
PICK = int(with_blocks[0]) if len(with_blocks) else 0
trace = load_trace(traces.at[PICK, "path"])
turns = trace_turns(trace)
print("session", "/".join(traces.at[PICK, "parts"]), "adapter", trace.get("adapter"), "purpose", trace.get("purpose"))
plot_session(turns, title="/".join(traces.at[PICK, "parts"]))""",
        """turns""",
        """# What the model generated in each turn (from the engine's token ids).
from pathlib import Path

from transformers import AutoTokenizer

model_path = Path(run.metadata.get("model_path", "/nonexistent"))
tokenizer = AutoTokenizer.from_pretrained(model_path) if model_path.is_dir() else None
for node in trace["nodes"]:
    ids = node["completion_token_ids"]
    text = tokenizer.decode(ids) if tokenizer else "(tokenizer not on this machine)"
    print(f"--- turn {node['id']} ({len(ids)} tokens)\\n{text[:800]}")""",
    ],
    "cost.ipynb": [
        "# Cost\nWall time, tokens sampled and trained, and device-hours per harness and for the evaluation. "
        "Set `USD_PER_DEVICE_HOUR` to your price.",
        SETUP,
        """from harness_rl.analysis.cost import cost_table

USD_PER_DEVICE_HOUR = 3.0  # e.g. one H100 on demand; set yours
cost = cost_table(run, devices=1, usd_per_device_hour=USD_PER_DEVICE_HOUR)
cost""",
        """from matplotlib.figure import Figure

fig = Figure(figsize=(7, 3), layout="constrained")
ax1, ax2 = fig.subplots(1, 2)
ax1.bar(cost["what"], cost["device_h"])
ax1.set_title("device-hours")
ax2.bar(cost["what"], cost["sampled_tokens"])
ax2.set_title("tokens sampled")
fig""",
        """# Where a step's time goes, per harness: rollout phases (time/rollout_*_s, where logged), waiting for
# rollouts, the optimizer step and publishing the adapter (seconds per step).
from harness_rl.analysis.plots import plot_training_curves

plot_training_curves(run.curves, ["time/rollout_*_s", "time/wait_for_rollouts_s", "time/train_step_s",
                                  "time/publish_s"])""",
    ],
}


def build(name: str, cells: list[str]) -> nbformat.NotebookNode:
    notebook = new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [new_markdown_cell(cells[0]), *(new_code_cell(source) for source in cells[1:])]
    for index, cell in enumerate(notebook.cells):
        cell.id = f"cell-{index}"  # stable ids: regenerating a notebook changes only the cells that changed
    return notebook


def main() -> None:
    for name, cells in NOTEBOOKS.items():
        nbformat.write(build(name, cells), HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
