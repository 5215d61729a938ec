"""Append-only JSONL metrics: one line per record, flushed at once so a killed run keeps every finished step."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any


class JsonlSink:
    """Writes ``{"step": ..., "time": ..., **metrics}`` lines to one file; safe to call from several threads."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file = self.path.open("a", encoding="utf-8")

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        record = {"step": step, "time": time.time(), **metrics}
        line = json.dumps(record, default=_jsonable)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)
