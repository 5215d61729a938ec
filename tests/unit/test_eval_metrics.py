"""Evaluation metrics: the unbiased pass@k estimator, bootstrap intervals over tasks, and per-row summaries
that leave unscorable rollouts out and compare each checkpoint with the base model on the same tasks."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from harness_rl.eval.metrics import BASE, bootstrap_ci, pass_at_k, summarize


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of k-subsets of n samples (c of them correct) that contain a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (6, 1, 4), (8, 0, 2), (4, 4, 2)])
def test_pass_at_k_matches_enumeration(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k))


def test_pass_at_1_is_the_solve_rate_and_too_few_samples_is_nan():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert math.isnan(pass_at_k(2, 1, 3))
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)


def test_bootstrap_ci_brackets_the_mean_and_narrows_with_more_tasks():
    rng = np.random.default_rng(1)
    few = rng.binomial(1, 0.4, size=20).astype(float)
    many = rng.binomial(1, 0.4, size=600).astype(float)
    lo, hi = bootstrap_ci(few)
    assert lo <= few.mean() <= hi and lo < hi
    lo2, hi2 = bootstrap_ci(many)
    assert lo2 <= many.mean() <= hi2
    assert hi2 - lo2 < hi - lo
    assert hi2 - lo2 < 0.1  # about 2 x 1.96 x sqrt(0.24 / 600) = 0.078


def test_bootstrap_ci_degenerate_inputs():
    assert all(math.isnan(x) for x in bootstrap_ci([])) and all(math.isnan(x) for x in bootstrap_ci([math.nan]))
    assert bootstrap_ci([0.5]) == (0.5, 0.5)
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)


def test_bootstrap_ci_is_reproducible_for_a_seed():
    values = [0.0, 1.0, 0.5, 0.0, 1.0, 1.0]
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)


def record(checkpoint, task, solved, *, sample=0, tool_calls=2, unscorable=None, step=None, blocked=0):
    trained = None if checkpoint == BASE else "h"
    return {"checkpoint": checkpoint, "trained_harness": trained, "step": 0 if checkpoint == BASE else step,
            "harness": "h", "task_id": task, "sample": sample, "solved": solved, "unscorable": unscorable,
            "tool_calls": tool_calls, "generated_tokens": 10, "blocked": blocked, "seconds": 1.0}  # fmt: skip


def test_summary_rows_compare_with_base_and_skip_unscorable():
    rows = [
        record(BASE, "t1", True, tool_calls=4), record(BASE, "t2", False), record(BASE, "t3", False),
        record("h/step_1", "t1", True, step=1, tool_calls=2), record("h/step_1", "t2", True, step=1, tool_calls=3),
        record("h/step_1", "t3", False, step=1, unscorable="harness failed", blocked=1),
    ]  # fmt: skip
    summary = summarize(pd.DataFrame(rows)).set_index("checkpoint")
    assert list(summary.index) == [BASE, "h/step_1"]
    base, step1 = summary.loc[BASE], summary.loc["h/step_1"]
    assert base["pass@1"] == pytest.approx(1 / 3)
    # t3 is unscorable for step_1: left out of its rate, counted in its own column
    assert step1["pass@1"] == pytest.approx(1.0) and step1["unscorable"] == 1 and step1["tasks"] == 2
    assert step1["delta_pass@1"] == pytest.approx(0.5)  # tasks both rows scored: t1 (0), t2 (+1)
    assert step1["tool_calls_solved"] == pytest.approx(2.5)
    assert step1["common_solved_tasks"] == 1  # only t1 solved by both
    assert step1["tool_calls_common"] == 2 and step1["base_tool_calls_common"] == 4
    assert step1["blocked"] == 1


def test_pass_at_k_column_with_several_samples():
    rows = [record(BASE, "t1", s == 0, sample=s) for s in range(4)] + [
        record(BASE, "t2", False, sample=s) for s in range(4)
    ]
    summary = summarize(pd.DataFrame(rows), pass_k=[2, 4])
    assert summary.loc[0, "pass@1"] == pytest.approx(0.125)
    assert summary.loc[0, "pass@2"] == pytest.approx((0.5 + 0.0) / 2)
    assert summary.loc[0, "pass@4"] == pytest.approx(0.5)
