"""``python -m harness_rl.safety check FILE.jsonl``: judge tool calls offline, one JSON line in, one out.

Input lines: ``{"harness": ..., "tool": ..., "arguments": {...} | "json string", "protected_paths": [...]}``,
optionally ``"workspace"``, ``"cwd"``, ``"own_pids"`` and ``"mode"`` (``on``/``strict``/``off``). Output lines:
``{"decision": "allow"|"block", "rule": ..., "explanation": ...}``. ``-`` reads stdin. A line that is not a JSON
object gives an undecidable verdict instead of stopping the run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from harness_rl.safety.gate import Decision, GateContext, SafetyGate
from harness_rl.safety.presets import preset


def check_lines(lines: Iterable[str], default_workspace: str, default_mode: str = "on") -> Iterator[Decision]:
    """One decision per non-empty input line (see the module docstring for the line format)."""
    gates: dict[str, SafetyGate] = {}
    for line in lines:
        if not line.strip():
            continue
        try:
            record: Any = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            record = {"tool": "", "arguments": line}
        mode = str(record.get("mode") or default_mode)
        gate = gates.get(mode)
        if gate is None:
            gate = gates[mode] = SafetyGate(preset(mode))
        yield gate.inspect(
            record.get("harness"),
            str(record.get("tool") or ""),
            record.get("arguments"),
            context_of(record, default_workspace),
        )


def context_of(record: dict[str, Any], default_workspace: str) -> GateContext:
    """The gate context an input line describes."""
    protected = record.get("protected_paths") or ()
    pids = record.get("own_pids") or ()
    return GateContext(
        workspace=str(record.get("workspace") or default_workspace),
        cwd=record.get("cwd") if isinstance(record.get("cwd"), str) else None,
        protected_paths=tuple(str(p) for p in protected) if isinstance(protected, list) else (),
        own_pids=frozenset(int(p) for p in pids if isinstance(p, int | str) and str(p).isdigit())
        if isinstance(pids, list)
        else frozenset(),
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m harness_rl.safety``."""
    parser = argparse.ArgumentParser(prog="python -m harness_rl.safety", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="judge each JSONL line of FILE (or - for stdin)")
    check.add_argument("file")
    check.add_argument("--workspace", default=os.getcwd(), help="workspace root for lines without one")
    check.add_argument("--mode", default="on", choices=("on", "strict", "off"), help="config preset")
    args = parser.parse_args(argv)
    stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8", errors="replace")  # noqa: SIM115
    with stream:
        for decision in check_lines(stream, args.workspace, args.mode):
            sys.stdout.write(json.dumps(decision.to_dict(), ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
