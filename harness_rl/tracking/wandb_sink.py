"""wandb metrics, offline by default: a run on a cluster with no network still records everything locally."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class WandbSink:
    """Thin wrapper so the trainer never imports wandb when the logger is disabled."""

    def __init__(self, *, project: str, mode: str, run_dir: Path, name: str, config: dict[str, Any]):
        # wandb checks for updates and reports errors over the network unless told not to.
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ.setdefault("WANDB_DISABLE_GIT", "true")
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        import wandb

        self._wandb = wandb
        self.run = wandb.init(
            project=project, mode=mode, dir=str(run_dir), name=name, config=config, reinit="finish_previous"
        )

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()
