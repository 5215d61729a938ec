"""`python eval.py run=...` on the run the CPU e2e training test produces: the base model and each checkpoint
run the held-out tasks through the real engine, proxy and harness; the table has the base row and one row per
checkpoint and harness, the plots are real PNGs, the notebooks execute on the run and draw their figures, and
an interrupted evaluation resumes without rerunning finished cells."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient
from PIL import Image

from harness_rl.proxy.export import read_trace_jsonl
from tests.e2e.conftest import TRAIN_STEPS
from tests.processes import processes_mentioning

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.harness]

ROOT = Path(__file__).resolve().parents[2]
HARNESS = "mini_swe_agent"
#: Cheap on 2 cores: the first 4 held-out file-write tasks once each, one agent step per session (the default's).
EVAL_OVERRIDES = ["eval.max_tasks=4", "eval.max_sessions=4", "logger.wandb.mode=offline"]
NOTEBOOKS = sorted((ROOT / "analysis").glob("*.ipynb"))


def run_eval(run_dir: Path, *overrides: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true"}
    argv = [sys.executable, "eval.py", f"run={run_dir}", *EVAL_OVERRIDES, *overrides]
    return subprocess.run(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def eval_run(train_run):
    run_dir, _ = train_run
    done = run_eval(run_dir)
    print(done.stdout[-6000:], done.stderr[-6000:])
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
    return run_dir


def table_rows(table: str) -> list[list[str]]:
    lines = [line for line in table.strip().splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def results(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "eval" / "results.jsonl").read_text().splitlines()]


def test_table_has_base_row_and_one_row_per_checkpoint_and_harness(eval_run):
    checkpoints = [f"{HARNESS}/step_{k}" for k in range(1, TRAIN_STEPS + 1)]
    rows = table_rows((eval_run / "eval" / "table.md").read_text())
    assert [(r[0], r[1]) for r in rows] == [(HARNESS, "base")] + [(HARNESS, c) for c in checkpoints]
    assert rows[0][3] == "" and all(r[3] for r in rows[1:])  # the change against base on checkpoint rows
    summary = pd.read_csv(eval_run / "eval" / "summary.csv")
    assert list(summary["checkpoint"]) == ["base", *checkpoints]
    assert ((summary["pass@1"] >= 0) & (summary["pass@1"] <= 1)).all()
    assert (summary["pass@1_lo"] <= summary["pass@1"]).all() and (summary["pass@1"] <= summary["pass@1_hi"]).all()


def test_each_row_ran_every_held_out_task_on_its_adapter(eval_run):
    from omegaconf import OmegaConf

    from harness_rl.eval.evaluate import held_out_tasks

    held_out = sorted(t.id for t in held_out_tasks(OmegaConf.load(eval_run / "eval" / "config.yaml")))
    assert len(held_out) >= 2
    records = results(eval_run)
    by_row: dict[str, list[str]] = {}
    for record in records:
        by_row.setdefault(record["checkpoint"], []).append(record["task_id"])
    assert {row: sorted(ids) for row, ids in by_row.items()} == dict.fromkeys(by_row, held_out)
    assert len(by_row) == TRAIN_STEPS + 1
    for record in records:
        if record["unscorable"] is not None:
            continue
        trace = read_trace_jsonl(Path(record["rollout_dir"]) / "trace.jsonl")
        assert trace["purpose"] == "eval"
        expected = None if record["checkpoint"] == "base" else f"eval-{HARNESS}-step{record['step']}"
        assert trace["adapter"] == expected == record["adapter"]
        assert record["generated_tokens"] == sum(len(n["completion_token_ids"]) for n in trace["nodes"]
                                                 if not n["budget_exhausted"])  # fmt: skip
    engine_log = (eval_run / "eval" / "engine.log").read_text()
    assert engine_log.count('"POST /v1/load_lora_adapter HTTP/1.1" 200') == TRAIN_STEPS


def test_plots_are_real_pngs(eval_run):
    for name in ("pass_at_1.png", "tool_calls_solved.png"):
        path = eval_run / "eval" / name
        assert path.stat().st_size > 10_000
        with Image.open(path) as image:
            assert image.format == "PNG" and image.width >= 600 and image.height >= 400
            assert len(image.convert("L").getcolors(maxcolors=1 << 16)) > 10


def test_metrics_go_to_jsonl_and_offline_wandb(eval_run):
    lines = [json.loads(x) for x in (eval_run / "eval" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == list(range(TRAIN_STEPS + 1))
    assert all(f"eval/{HARNESS}/pass@1" in m for m in lines)
    assert list((eval_run / "eval" / "wandb").glob("offline-run-*"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes_on_the_run_and_draws_figures(eval_run, notebook, monkeypatch):
    monkeypatch.setenv("HARNESS_RL_RUN", str(eval_run))  # the kernel inherits it
    nb = nbformat.read(notebook, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    figures = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert figures, f"{notebook.name} drew no figure"


def cell_keys(lines: list[str]) -> list[tuple]:
    return [(r["checkpoint"], r["harness"], r["task_id"], r["sample"]) for r in map(json.loads, lines)]


def test_rerun_skips_finished_cells_and_an_interrupted_eval_resumes(eval_run, train_run):
    """Runs last: it rewrites results.jsonl (and restores every cell)."""
    _, name = train_run
    path = eval_run / "eval" / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    done = run_eval(eval_run)  # everything finished: nothing runs, no engine starts
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "nothing to run" in done.stdout + done.stderr
    assert path.read_text().splitlines(keepends=True) == lines

    # The last checkpoint's cells are to run again; Ctrl-C arrives once the first of them is stored.
    last = f"{HARNESS}/step_{TRAIN_STEPS}"
    kept = [line for line in lines if json.loads(line)["checkpoint"] != last]
    path.write_text("".join(kept))
    argv = [sys.executable, "eval.py", f"run={eval_run}", *EVAL_OVERRIDES, "eval.max_sessions=2", "logger=none"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            # a suite run from a non-interactive shell inherits SIGINT ignored (see test_train_cpu)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    try:
        deadline = time.monotonic() + 900
        while len(path.read_text().splitlines()) == len(kept) and time.monotonic() < deadline:
            assert proc.poll() is None, "eval.py exited before finishing a cell"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:  # the test failed: still stop what the evaluation started
            proc.terminate()
            proc.wait(timeout=60)
    assert processes_mentioning(name) == []  # the engine (serving the run's model name) is gone
    interrupted = path.read_text().splitlines(keepends=True)
    assert interrupted[: len(kept)] == kept
    finished = len(interrupted) - len(kept)
    assert 1 <= finished < len(lines) - len(kept)

    done = run_eval(eval_run)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert json.loads((eval_run / "eval" / "last_pass.json").read_text())["cells_run"] == len(lines) - len(interrupted)
    after = path.read_text().splitlines(keepends=True)
    assert after[: len(interrupted)] == interrupted  # finished cells were not rerun
    assert sorted(cell_keys(after)) == sorted(cell_keys(lines))
