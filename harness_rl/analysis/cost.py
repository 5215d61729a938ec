"""What a run cost: wall-clock time, tokens sampled and trained, and device-hours at a given hourly price.

There is no accounting of GPU-hours in the logs yet, so device time is estimated as wall time x the number of
accelerators the run held (one engine device by default); the price per device-hour is the caller's.
"""

from __future__ import annotations

import pandas as pd

from harness_rl.analysis.loaders import Run


def cost_table(run: Run, *, devices: int = 1, usd_per_device_hour: float | None = None) -> pd.DataFrame:
    """One row per harness (and the evaluation, when one ran): time, tokens and (optionally) dollars.

    Args:
        run: The loaded run.
        devices: Accelerators held for the run's whole wall time.
        usd_per_device_hour: Price of one device-hour; no dollar column when None.
    """
    rows = []
    metrics = run.metrics
    wall_h = (metrics["time"].max() - metrics["time"].min()) / 3600 if "time" in metrics and len(metrics) > 1 else 0.0
    curves = run.curves
    for harness in run.harnesses:
        mine = curves[curves["harness"] == harness]

        def total(metric: str, mine: pd.DataFrame = mine) -> float:
            return float(mine.loc[mine["metric"] == metric, "value"].sum())

        rows.append({
            "what": f"train {harness}",
            "steps": int(mine["step"].max()) if len(mine) else 0,
            "rollouts": total("rollout/count"),
            "sampled_tokens": total("rollout/sampled_tokens"),
            "trained_tokens": total("train/trained_tokens"),
            "train_step_h": total("time/train_step_s") / 3600,
            "wait_for_rollouts_h": total("time/wait_for_rollouts_s") / 3600,
            "wall_h": wall_h,
        })  # fmt: skip
    results = run.eval_results
    if not results.empty:
        wall = (results["time"].max() - results["time"].min() + results["seconds"].max()) / 3600
        rows.append({"what": "eval", "steps": results["step"].nunique(), "rollouts": float(len(results)),
                     "sampled_tokens": float(results["generated_tokens"].sum()), "trained_tokens": 0.0,
                     "train_step_h": 0.0, "wait_for_rollouts_h": 0.0, "wall_h": wall})  # fmt: skip
    table = pd.DataFrame(rows)
    if not table.empty:
        table["device_h"] = table["wall_h"] * devices
        if usd_per_device_hour is not None:
            table["usd"] = table["device_h"] * usd_per_device_hour
    return table
