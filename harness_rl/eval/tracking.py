"""The evaluation's metrics to the tracking sinks: ``eval/metrics.jsonl`` and wandb (offline by default).

One record per checkpoint step (the base model is step 0), keyed ``eval/<harness>/<metric>`` for adapters in
their own harness and ``eval/<harness>/from_<trained harness>/<metric>`` for cross-harness rows, so wandb
draws each metric over training steps.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from harness_rl.eval.metrics import BASE

#: Summary columns sent to the sinks (intervals included where they exist).
LOGGED = ("pass@1", "pass@1_lo", "pass@1_hi", "delta_pass@1", "tool_calls_solved", "tool_calls_common",
          "generated_tokens", "blocked", "unscorable", "wall_s")  # fmt: skip


def step_records(summary: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """The summary as one flat metrics record per checkpoint step."""
    records: dict[int, dict[str, Any]] = {}
    pass_k = [c for c in summary.columns if c.startswith("pass@") and c[5:].isdigit() and c != "pass@1"]
    for row in summary.to_dict("records"):
        native = row["checkpoint"] == BASE or row["trained_harness"] == row["harness"]
        prefix = f"eval/{row['harness']}" + ("" if native else f"/from_{row['trained_harness']}")
        record = records.setdefault(int(row["step"]), {})
        for column in (*LOGGED, *pass_k):
            value = row.get(column)
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                record[f"{prefix}/{column}"] = value
    return dict(sorted(records.items()))


def log_summary(cfg: DictConfig, eval_dir: Path, summary: pd.DataFrame) -> None:
    """Log the summary through the tracking sinks configured by ``cfg.logger``."""
    from harness_rl.tracking import build_metrics

    metrics = build_metrics(
        Path(eval_dir),
        wandb_enabled=cfg.logger.wandb.enabled,
        wandb_mode=cfg.logger.wandb.mode,
        project=cfg.logger.wandb.project,
        name=f"{cfg.run_name}-eval",
        config=OmegaConf.to_container(cfg, resolve=True),
    )
    try:
        for step, record in step_records(summary).items():
            metrics.log(record, step=step)
    finally:
        metrics.close()
