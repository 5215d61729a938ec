"""Metrics sinks: JSONL always, wandb (offline by default) when enabled."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class Metrics:
    """Fans one metrics record out to every configured sink."""

    def __init__(self, sinks: list[Any]):
        self.sinks = sinks

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        for sink in self.sinks:
            sink.log(metrics, step=step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def build_metrics(
    run_dir: Path, *, wandb_enabled: bool, wandb_mode: str, project: str, name: str, config: dict[str, Any]
) -> Metrics:
    from harness_rl.tracking.jsonl import JsonlSink

    sinks: list[Any] = [JsonlSink(Path(run_dir) / "metrics.jsonl")]
    if wandb_enabled and wandb_mode != "disabled":
        from harness_rl.tracking.wandb_sink import WandbSink

        sinks.append(WandbSink(project=project, mode=wandb_mode, run_dir=Path(run_dir), name=name, config=config))
    return Metrics(sinks)
