"""A session's trace as JSONL: one self-describing record per line, for logs, notebooks and replays.

    {"type": "session", "key", "adapter", "purpose", "max_requests", "client_model", "sampling", "requests"}
    {"type": "node", ...one rollout-graph node (see proxy/graph.py Node.to_json)...}      x nodes
    {"type": "sequence", "node_ids", "input_ids", "loss_mask", "logprobs"}               x sequences
    {"type": "failure", "t", "kind", "message", ...}                                      x failures

Line-oriented so that a long run's traces can be concatenated, streamed through pandas (`read_json(...,
lines=True)`) or grepped for a node without loading whole sessions; `read_trace_jsonl` turns the lines back
into the admin API's trace JSON.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

_LISTS = {"node": "nodes", "sequence": "sequences", "failure": "failures"}


def trace_records(trace: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The JSONL records of a trace, session header first."""
    header = {k: v for k, v in trace.items() if k not in _LISTS.values()}
    yield {"type": "session", **header}
    for record_type, list_name in _LISTS.items():
        for item in trace.get(list_name) or []:
            yield {"type": record_type, **item}


def trace_to_jsonl(trace: dict[str, Any]) -> str:
    """The whole trace as JSONL text (one record per line, newline-terminated)."""
    return "".join(json.dumps(record, separators=(",", ":")) + "\n" for record in trace_records(trace))


def trace_from_records(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Rebuilds the trace JSON from its records.

    Raises:
        ValueError: if the session header is missing or repeated, or a record's type is unknown.
    """
    trace: dict[str, Any] | None = None
    lists: dict[str, list[dict[str, Any]]] = {name: [] for name in _LISTS.values()}
    for n, record in enumerate(records, start=1):
        body = dict(record)
        record_type = body.pop("type", None)
        if record_type == "session":
            if trace is not None:
                raise ValueError(f"record {n}: a second session header (one session per file)")
            trace = body
        elif record_type in _LISTS:
            lists[_LISTS[record_type]].append(body)
        else:
            raise ValueError(f"record {n}: unknown type {record_type!r} (expected session, node, sequence, failure)")
    if trace is None:
        raise ValueError("no session header record")
    return {**trace, **lists}


def read_trace_jsonl(path: Path) -> dict[str, Any]:
    """Reads a file written by `write_trace_jsonl` back into the trace JSON."""
    with open(path) as f:
        return trace_from_records(json.loads(line) for line in f if line.strip())


def write_trace_jsonl(path: Path, trace: dict[str, Any]) -> None:
    """Writes the trace atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(trace_to_jsonl(trace))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
