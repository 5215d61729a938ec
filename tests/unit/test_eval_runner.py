"""The evaluation plan and its resumable runner: finished (checkpoint, harness, task, sample) cells are stored
at once and never run again after an interruption; a torn last line reruns only its cell."""

from __future__ import annotations

import contextlib
import json
import threading

import pytest

from harness_rl.eval.plan import BASE_CHECKPOINT, Checkpoint, find_checkpoints, plan_cells, select_checkpoints
from harness_rl.eval.results import ResultsStore, read_results
from harness_rl.eval.runner import run_cells


class Interrupted(BaseException):
    """Stands for Ctrl-C arriving while a cell runs."""


def make_run(tmp_path, harnesses=("a", "b"), steps=(1, 2)):
    for harness in harnesses:
        for step in steps:
            adapter = tmp_path / "checkpoints" / harness / f"step_{step:06d}" / "adapter"
            adapter.mkdir(parents=True)
            (adapter / "adapter_config.json").write_text("{}")
    (tmp_path / "checkpoints" / "a" / "step_000003").mkdir()  # an unfinished checkpoint: no adapter yet
    return tmp_path


def test_find_and_select_checkpoints(tmp_path):
    run = make_run(tmp_path)
    found = find_checkpoints(run)
    assert [c.label for c in found] == ["a/step_1", "a/step_2", "b/step_1", "b/step_2"]
    assert found[0].engine_name == "eval-a-step1" and found[0].adapter_dir == run / "checkpoints/a/step_000001/adapter"
    assert [c.label for c in find_checkpoints(run, ["b"])] == ["b/step_1", "b/step_2"]
    assert [c.label for c in select_checkpoints(found, ["step_2"])] == ["a/step_2", "b/step_2"]
    assert [c.label for c in select_checkpoints(found, ["b/step_1", 1])] == ["a/step_1", "b/step_1"]
    with pytest.raises(ValueError, match="a/step_1, a/step_2"):
        select_checkpoints(found, ["step_9"])


def test_plan_has_base_in_every_harness_and_adapters_in_their_own():
    ckpts = [Checkpoint("a/step_1", "a", 1, None), Checkpoint("b/step_1", "b", 1, None)]
    cells = plan_cells(ckpts, ["a", "b"], ["t1", "t2"], samples=2, cross_harness=False)
    rows = {(c.checkpoint.label, c.harness) for c in cells}
    assert rows == {("base", "a"), ("base", "b"), ("a/step_1", "a"), ("b/step_1", "b")}
    assert len(cells) == 4 * 2 * 2
    assert cells[0].checkpoint == BASE_CHECKPOINT
    cross = plan_cells(ckpts, ["a", "b"], ["t1"], samples=1, cross_harness=True)
    assert {(c.checkpoint.label, c.harness) for c in cross} == rows | {("a/step_1", "b"), ("b/step_1", "a")}
    assert {c.harness for c in plan_cells(ckpts, ["a"], ["t1"], samples=1, cross_harness=False)} == {"a"}


class ScriptedPools:
    """Cell pools whose cells succeed until the ``interrupt_at``-th run, which raises ``Interrupted``."""

    def __init__(self, interrupt_at=None):
        self.interrupt_at = interrupt_at
        self.ran = []
        self.opened = []
        self.aborted = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def open(self, checkpoint):
        self.opened.append(checkpoint.label)
        yield self

    def run(self, cell):
        with self._lock:
            if self.interrupt_at is not None and len(self.ran) == self.interrupt_at:
                raise Interrupted()
            self.ran.append(cell.key)
        return {"checkpoint": cell.checkpoint.label, "harness": cell.harness, "task_id": cell.task_id,
                "sample": cell.sample, "solved": True}  # fmt: skip

    def abort(self):
        self.aborted += 1


def plan():
    ckpts = [Checkpoint("a/step_1", "a", 1, None), Checkpoint("a/step_2", "a", 2, None)]
    return plan_cells(ckpts, ["a"], ["t1", "t2", "t3"], samples=1, cross_harness=False)


def test_interrupted_eval_resumes_without_rerunning_finished_cells(tmp_path):
    cells = plan()
    path = tmp_path / "eval" / "results.jsonl"
    first = ScriptedPools(interrupt_at=4)
    with pytest.raises(Interrupted):
        run_cells(cells, ResultsStore(path), first.open, max_sessions=1)
    assert first.aborted == 1  # the harnesses in flight were stopped
    stored = [(r["checkpoint"], r["harness"], r["task_id"], r["sample"]) for r in read_results(path)]
    assert sorted(stored) == sorted(first.ran) and len(stored) == 4

    second = ScriptedPools()
    ran = run_cells(cells, ResultsStore(path), second.open, max_sessions=2)
    assert ran == len(cells) - 4
    assert set(second.ran) == {c.key for c in cells} - set(first.ran)
    assert second.opened == ["a/step_1", "a/step_2"]  # base had nothing left: its pool was never opened
    assert len(read_results(path)) == len(cells)

    third = ScriptedPools()
    assert run_cells(cells, ResultsStore(path), third.open, max_sessions=2) == 0
    assert third.ran == [] and third.opened == []


def test_torn_last_line_reruns_only_its_cell(tmp_path):
    cells = plan()
    path = tmp_path / "results.jsonl"
    run_cells(cells[:3], ResultsStore(path), ScriptedPools().open, max_sessions=1)
    with path.open("a") as fh:  # a kill in the middle of writing the fourth record
        fh.write(json.dumps({"checkpoint": "a/step_1", "harness": "a", "task_id": "t1"})[:20])
    store = ResultsStore(path)
    assert len(store.records) == 3 and path.read_text().endswith("\n")
    again = ScriptedPools()
    run_cells(cells, store, again.open, max_sessions=1)
    assert set(again.ran) == {c.key for c in cells[3:]}
    assert len(read_results(path)) == len(cells)


def test_cell_error_propagates_after_storing_finished_cells(tmp_path):
    class Failing(ScriptedPools):
        def run(self, cell):
            if cell.task_id == "t3":
                raise RuntimeError("boom")
            return super().run(cell)

    pools = Failing()
    with pytest.raises(RuntimeError, match="boom"):
        run_cells(plan(), ResultsStore(tmp_path / "r.jsonl"), pools.open, max_sessions=1)
    assert len(read_results(tmp_path / "r.jsonl")) == 2
