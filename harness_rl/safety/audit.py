"""Audit records: one JSON-serialisable dict per inspected tool call, for the run's JSONL audit log."""

from __future__ import annotations

import time
from typing import Any

from harness_rl.safety.gate import Decision

#: Arguments longer than this are cut in the audit record (a Write of a large file would bloat the log).
MAX_ARGUMENT_CHARS = 2000


def audit_record(harness: str | None, tool: str, arguments: Any, decision: Decision, **extra: Any) -> dict[str, Any]:
    """The audit-log line for one call: verdict, rule, the canonical actions and (cut) arguments.

    ``extra`` adds caller fields such as the session key or graph node id.
    """
    text = arguments if isinstance(arguments, str) else repr(arguments)
    return {
        "time": time.time(),
        "harness": harness,
        "tool": tool,
        **decision.to_dict(),
        "actions": [action.describe() for action in decision.actions][:50],
        "arguments": text[:MAX_ARGUMENT_CHARS],
        **extra,
    }
