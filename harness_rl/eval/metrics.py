"""Evaluation metrics per (checkpoint, harness) row, with bootstrap confidence intervals over tasks.

Tasks, not rollouts, are the unit of resampling: the samples of one task are correlated (same instruction,
same verifier), so resampling rollouts would make the intervals too narrow. Unscorable rollouts (a harness
that could not start, a proxy failure, a verifier error) say nothing about the model; they are left out of
every rate and counted in their own column.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

#: Label of the base model's rows (no adapter).
BASE = "base"
#: Confidence level of every interval.
CONFIDENCE = 0.95


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator of Chen et al. (2021): 1 - C(n-c, k) / C(n, k).

    Args:
        n: Scorable samples of the task.
        c: Samples that solved it.
        k: Attempts allowed.

    Returns:
        The probability that at least one of ``k`` samples drawn without replacement from the ``n`` solves the
        task; NaN when ``n < k`` (not enough samples to estimate it).
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n} c={c}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if n < k:
        return math.nan
    if n - c < k:
        return 1.0
    # The product form avoids the huge binomials of the closed form.
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def bootstrap_ci(values: Sequence[float], *, n_resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (one value per task; NaNs are left out).

    Returns (NaN, NaN) for no values and the point itself for one value (nothing to resample).
    """
    from scipy.stats import bootstrap

    data = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    if data.size == 0:
        return math.nan, math.nan
    if data.size == 1 or np.all(data == data[0]):
        point = float(data.mean())
        return point, point
    result = bootstrap(
        (data,),
        np.mean,
        n_resamples=n_resamples,
        confidence_level=CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def per_task(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per task of one (checkpoint, harness) row: samples, solves, mean tool calls when solved."""
    scorable = rows[rows["unscorable"].isna()]
    solved = scorable[scorable["solved"]]
    out = pd.DataFrame(
        {
            "n": scorable.groupby("task_id").size(),
            "c": solved.groupby("task_id").size(),
            "tool_calls_solved": solved.groupby("task_id")["tool_calls"].mean(),
        }
    )
    out["c"] = out["c"].fillna(0).astype(int)
    out["pass1"] = out["c"] / out["n"]
    return out


def _ci_columns(prefix: str, values: Sequence[float], seed: int) -> dict[str, float]:
    lo, hi = bootstrap_ci(values, seed=seed)
    finite = [v for v in values if not math.isnan(v)]
    return {prefix: float(np.mean(finite)) if finite else math.nan, f"{prefix}_lo": lo, f"{prefix}_hi": hi}


def row_metrics(rows: pd.DataFrame, base: pd.DataFrame | None, *, pass_k: Sequence[int] = (),
                seed: int = 0) -> dict[str, float]:  # fmt: skip
    """The metrics of one (checkpoint, harness) row, and its change against the base row of the harness.

    Args:
        rows: Result records of the row (columns of ``results.jsonl``).
        base: Per-task table (``per_task``) of the base model in the same harness; None for the base row.
        pass_k: Values of k > 1 to report pass@k for (where every task has at least k samples).
        seed: Bootstrap seed (the same for every row, so intervals are reproducible).
    """
    tasks = per_task(rows)
    scorable = rows[rows["unscorable"].isna()]
    out: dict[str, float] = {
        "tasks": len(tasks),
        "rollouts": len(rows),
        "unscorable": int(rows["unscorable"].notna().sum()),
        "solved": int(scorable["solved"].sum()),
    }
    out |= _ci_columns("pass@1", list(tasks["pass1"]), seed)
    for k in pass_k:
        if k > 1:
            values = [pass_at_k(int(n), int(c), k) for n, c in zip(tasks["n"], tasks["c"], strict=True)]
            out |= _ci_columns(f"pass@{k}", values, seed)
    out |= _ci_columns("tool_calls_solved", list(tasks["tool_calls_solved"].dropna()), seed)
    out["generated_tokens"] = float(scorable["generated_tokens"].mean()) if len(scorable) else math.nan
    out["blocked"] = int(rows["blocked"].sum())
    out["blocked_per_rollout"] = float(rows["blocked"].mean()) if len(rows) else math.nan
    out["wall_s"] = float(rows["seconds"].sum())
    if base is not None:
        common = tasks.index.intersection(base.index)
        diffs = (tasks.loc[common, "pass1"] - base.loc[common, "pass1"]).tolist()
        out |= _ci_columns("delta_pass@1", diffs, seed)
        both = [t for t in common if tasks.at[t, "c"] > 0 and base.at[t, "c"] > 0]
        out["common_solved_tasks"] = len(both)
        out["tool_calls_common"] = float(tasks.loc[both, "tool_calls_solved"].mean()) if both else math.nan
        out["base_tool_calls_common"] = float(base.loc[both, "tool_calls_solved"].mean()) if both else math.nan
    return out


def summarize(results: pd.DataFrame, *, pass_k: Sequence[int] = (), seed: int = 0) -> pd.DataFrame:
    """One summary line per (checkpoint, harness) of ``results``; every row is compared with the base row.

    ``results`` has the columns of ``results.jsonl`` (see ``harness_rl.eval.runner.result_record``). The base
    rows come first within each harness, then checkpoints in (trained harness, step) order.
    """
    lines = []
    for harness, in_harness in results.groupby("harness", sort=True):
        base_rows = in_harness[in_harness["checkpoint"] == BASE]
        base_tasks = per_task(base_rows) if len(base_rows) else None
        keys = in_harness[["checkpoint", "trained_harness", "step"]].drop_duplicates()
        keys = keys.assign(is_base=keys["checkpoint"] != BASE).sort_values(["is_base", "trained_harness", "step"])
        for checkpoint, trained, step in zip(keys["checkpoint"], keys["trained_harness"], keys["step"], strict=True):
            rows = in_harness[in_harness["checkpoint"] == checkpoint]
            compare = None if checkpoint == BASE else base_tasks
            metrics = row_metrics(rows, compare, pass_k=pass_k, seed=seed)
            lines.append({"harness": harness, "checkpoint": checkpoint, "trained_harness": trained,
                          "step": step, **metrics})  # fmt: skip
    return pd.DataFrame(lines)
