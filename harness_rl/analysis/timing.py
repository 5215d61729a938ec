"""Wall times of a run, read from what it wrote: training start to its last optimizer step, the engine's
start-up, and the evaluation's span.

No file records these directly, so each is put together from the files a run leaves:

- ``metadata.json`` ``started``: when ``train.py`` set up the run (local time with its UTC offset);
- ``metrics.jsonl`` ``time``: epoch seconds at which each optimizer step was logged;
- ``train.log``: the line where the engine reported ready. Its timestamps are naive local times, so only their
  difference from the log's first line is used (anchored at ``started``), which keeps the result right on a
  machine in another time zone than the one that ran the training;
- ``eval/results.jsonl``: each finished cell's end ``time`` and its ``seconds``.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

# `[2026-12-01 15:53:37,788][harness_rl.engine.server][INFO] - vLLM ready at http://... after 44.2 s`
_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]")
_ENGINE_READY = re.compile(r"(vLLM|engine) ready at")


def _epoch(iso: str | None) -> float:
    if not iso:
        return math.nan
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return math.nan


def _log_seconds(line: str) -> float | None:
    match = _LOG_TIME.match(line)
    if not match:
        return None
    return datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S").timestamp() + int(match[2]) / 1000


def engine_ready_after_s(train_log: Path) -> float:
    """Seconds from the first line of ``train.log`` to the engine's "ready" line (NaN when not there yet)."""
    if not train_log.is_file():
        return math.nan
    first = None
    with train_log.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            at = _log_seconds(line)
            if at is None:
                continue
            first = at if first is None else first
            if _ENGINE_READY.search(line):
                return at - first
    return math.nan


def train_times(run_dir: Path, metadata: dict[str, Any], metrics: pd.DataFrame) -> dict[str, float]:
    """``train_wall_s``: start to last logged optimizer step; ``train_after_engine_s``: the same from the moment
    the engine was ready (what a user waits once the model is served); ``engine_ready_s``. NaN where unknown."""
    started = _epoch(metadata.get("started"))
    last_step = float(metrics["time"].max()) if "time" in metrics and len(metrics) else math.nan
    ready = engine_ready_after_s(Path(run_dir) / "train.log")
    return {
        "train_wall_s": last_step - started,
        "engine_ready_s": ready,
        "train_after_engine_s": last_step - (started + ready),
    }


def eval_wall_s(results: pd.DataFrame) -> float:
    """The evaluation's span: start of its first cell to end of its last (NaN without ``eval/results.jsonl``).

    Engine start-up and gaps between resumed evaluations are inside the span when they fall between cells.
    """
    if results.empty or not {"time", "seconds"} <= set(results.columns):
        return math.nan
    ends = pd.to_numeric(results["time"], errors="coerce")
    starts = ends - pd.to_numeric(results["seconds"], errors="coerce").fillna(0)
    return float(ends.max() - starts.min())
