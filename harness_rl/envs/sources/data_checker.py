"""The data-analysis tasks' checker: compares the agent's answer file with the expected answer.

This file is copied verbatim into every task's ``tests/`` folder as ``check.py`` and run by ``tests/test.sh``
with ``$HRL_PYTHON``, so it uses the standard library only and imports nothing from harness_rl.

``expected.json`` (next to it) holds::

    {"kind": "number" | "integer" | "text" | "list", "value": ..., "abs_tol": float, "rel_tol": float,
     "answer_file": "answer.txt", "protected": {"data.csv": "<sha256>", ...}}

Rules: a number is right when within ``abs_tol`` or ``rel_tol`` of the value (the tolerances cover the rounding
the question asks for); the file may hold the number alone or one sentence with exactly one number in it
(thousands separators and a trailing "%" allowed). Labels compare after folding case, punctuation and
whitespace (``normalise_text``), or as numbers when both are numbers ("6" equals "6.0"). A list must have the
same labels in the same order, separated by commas or newlines. A missing or empty answer file, or a changed
input file, scores 0.

Usage: ``python check.py --expected tests/expected.json --workspace WS --logs LOGS`` (writes
``LOGS/reward.json`` as ``{"reward": 0 or 1}`` and the reason to ``LOGS/check.txt``, and exits 0).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
import unicodedata
from pathlib import Path

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?")


def normalise_text(value: str) -> str:
    """Case, punctuation and whitespace folded away (the catalog applies the same rule to data levels)."""
    value = unicodedata.normalize("NFKC", str(value)).casefold()
    return " ".join(re.sub(r"[^\w\s]", " ", value).split())


def parse_number(text: str) -> float | None:
    """The one number in ``text`` (None when there is none, or more than one)."""
    text = text.strip().strip("`*\"'").strip()
    found = _NUMBER.findall(text)
    if len(found) != 1:
        return None
    try:
        return float(found[0].replace(",", ""))
    except ValueError:
        return None


def numbers_match(given: float, expected: float, abs_tol: float, rel_tol: float) -> bool:
    """Whether ``given`` is within the absolute or the relative tolerance of ``expected``."""
    return math.isfinite(given) and math.isclose(given, expected, rel_tol=rel_tol, abs_tol=abs_tol)


def labels_match(given: str, expected: str) -> bool:
    """Whether two labels are the same after normalisation, or the same number."""
    if normalise_text(given) == normalise_text(expected) and normalise_text(expected):
        return True
    a, b = _plain_number(given), _plain_number(expected)
    return a is not None and b is not None and a == b


def _plain_number(text: str) -> float | None:
    try:
        value = float(text.strip().strip("`*\"'").strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def score(answer: str, expected: dict) -> tuple[float, str]:
    """The reward (1.0 or 0.0) for ``answer`` and a one-line reason."""
    kind, value = expected["kind"], expected["value"]
    text = answer.strip()
    if not text:
        return 0.0, "empty answer"
    if kind in ("number", "integer"):
        given = parse_number(text)
        if given is None:
            return 0.0, f"no single number in the answer: {text[:80]!r}"
        ok = numbers_match(given, float(value), float(expected["abs_tol"]), float(expected["rel_tol"]))
        return (1.0, "correct") if ok else (0.0, f"got {given!r}, expected {value!r}")
    if kind == "text":
        ok = labels_match(text, str(value))
        return (1.0, "correct") if ok else (0.0, f"got {text[:80]!r}, expected {value!r}")
    if kind == "list":
        items = [item for item in re.split(r"[,\n]", text) if item.strip()]
        ok = len(items) == len(value) and all(labels_match(g, str(e)) for g, e in zip(items, value, strict=True))
        return (1.0, "correct") if ok else (0.0, f"got {items!r}, expected {value!r}")
    raise ValueError(f"unknown answer kind {kind!r}")


def check(expected_path: Path, workspace: Path) -> tuple[float, str]:
    """Score the workspace: the protected inputs must be unchanged and the answer file right."""
    expected = json.loads(expected_path.read_text())
    for rel, digest in sorted(expected.get("protected", {}).items()):
        path = workspace / rel
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            return 0.0, f"input file {rel} was changed or removed"
    answer_path = workspace / expected["answer_file"]
    if not answer_path.is_file():
        return 0.0, f"no answer file {expected['answer_file']}"
    return score(answer_path.read_text(errors="replace"), expected)


def main(argv: list[str] | None = None) -> int:
    """Write ``reward.json`` for the workspace and exit 0 (a crash here makes the rollout unscorable)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expected", type=Path, required=True)
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--logs", type=Path, required=True)
    args = parser.parse_args(argv)
    reward, detail = check(args.expected, args.workspace)
    args.logs.mkdir(parents=True, exist_ok=True)
    (args.logs / "reward.json").write_text(json.dumps({"reward": reward}) + "\n")
    (args.logs / "check.txt").write_text(detail + "\n")
    print(f"reward={reward} {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
