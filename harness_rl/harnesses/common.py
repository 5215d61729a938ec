"""Helpers shared by the harness adapters: config templates, JSONL event logs, log tails, memory caps."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

CONFIG_DIR = Path(__file__).parent / "configs"

#: RLIMIT_AS for Node harnesses. Node reserves far more address space than it touches: pi 0.73.1 on Node 20
#: failed every model call with "Connection error." (its HTTP client could not reserve memory) under caps up
#: to 20 GiB and worked from 22 GiB; 32 GiB leaves headroom. The cap still stops a runaway tool command.
NODE_ADDRESS_SPACE_BYTES = 32 << 30
#: RLIMIT_AS for Bun harnesses: opencode 1.18.33 crashed at start-up ("MemoryExhaustion") under a 2 GiB cap
#: and worked at 4 GiB; 8 GiB leaves headroom for long sessions.
BUN_ADDRESS_SPACE_BYTES = 8 << 30

_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def fill_template(template: Any, values: dict[str, Any]) -> Any:
    """Substitute ``${name}`` placeholders in a parsed JSON template.

    A string that is exactly one placeholder becomes the value itself, keeping its type (so numbers and
    booleans stay numbers and booleans); a placeholder inside a longer string is replaced by ``str(value)``.

    Raises:
        KeyError: A placeholder has no value.
    """
    if isinstance(template, dict):
        return {fill_template(k, values): fill_template(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill_template(v, values) for v in template]
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template)
        if whole:
            return values[whole.group(1)]
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
    return template


def write_json_template(name: str, dest: Path, values: dict[str, Any]) -> Any:
    """Fill ``configs/<name>`` with ``values`` and write it to ``dest``; returns the filled document."""
    doc = fill_template(json.loads((CONFIG_DIR / name).read_text()), values)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(doc, indent=2))
    return doc


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, skipping lines that are not JSON objects.

    Harnesses killed mid-write leave a truncated last line, and some print plain-text lines (warnings)
    between events; both are skipped rather than failing the whole parse. A missing file gives [].
    """
    events = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def tail(path: Path, n: int = 2000) -> str:
    """The last ``n`` characters of a text file ("" when it does not exist)."""
    try:
        return path.read_text(errors="replace")[-n:]
    except FileNotFoundError:
        return ""
