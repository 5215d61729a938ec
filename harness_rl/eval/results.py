"""``eval/results.jsonl``: one line per finished cell, appended as soon as the cell ends.

The file is the evaluation's resume state: a restarted evaluation reads it and skips every cell already in it.
Each record is written with a single ``write`` of one newline-terminated line, flushed and fsync'ed, so a kill
can at most leave one torn last line; that line is cut off when the file is opened again (its cell reruns).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The fields of a record that identify its cell (see ``harness_rl.eval.plan.Cell.key``).
KEY_FIELDS = ("checkpoint", "harness", "task_id", "sample")


def record_key(record: dict[str, Any]) -> tuple[str, str, str, int]:
    """The cell key of a result record."""
    return (record["checkpoint"], record["harness"], record["task_id"], int(record["sample"]))


def read_results(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a results file (a torn last line is ignored); [] when there is none."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # a torn last line: the cell did not finish writing
        records.append(json.loads(line))
    return records


class ResultsStore:
    """Appends result records to one JSONL file and knows which cells are done; thread-safe.

    Args:
        path: The results file; created with its folder when missing.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._cut_torn_tail()
        self.records = read_results(self.path)
        self.done = {record_key(r) for r in self.records}
        self._lock = threading.Lock()

    def append(self, record: dict[str, Any]) -> None:
        """Record one finished cell (durably, before returning)."""
        line = (json.dumps(record, default=str) + "\n").encode("utf-8")
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            self.records.append(record)
            self.done.add(record_key(record))

    def _cut_torn_tail(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            log.warning("%s: dropping a torn last line (%d bytes); its cell runs again", self.path, len(data) - keep)
            with self.path.open("r+b") as fh:
                fh.truncate(keep)
