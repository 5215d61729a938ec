"""The checker of every synthetic task, copied into its ``tests/`` as ``check.py`` and run by ``tests/test.sh``.

Standard library only, so it runs under any Python (Harbor's containers included). Usage:
``python check.py CHECK_JSON WORKSPACE LOGS_DIR``; it writes ``LOGS_DIR/reward.json`` and exits 0, or exits 2
when the task cannot be scored (a budget task without a tool-call count), which the runners treat as
unscorable rather than reward 0.

Check kinds (``check.json``):
    qa: ``{"answer_file", "expected"}``: the answer file's text equals the expected answer after normalisation
        (case, surrounding whitespace, quotes, a trailing period; numbers compared as numbers).
    state: ``{"files": {path: expected file under tests/expected/}, "deleted": [paths], "max_tool_calls"}``:
        the reward is the fraction of listed files whose content matches (trailing whitespace ignored, JSON
        files compared as data) plus deleted paths that are gone; with ``max_tool_calls`` set, 0 when the
        rollout made more tool calls (``HRL_TOOL_CALLS``, else Harbor's ``/logs/agent/trajectory.json``),
        unscorable with neither.
    command: ``{"expected_output"}``: ``tests/command.sh`` exits 0 in the workspace and, when an expected
        output is given, prints it (trailing whitespace ignored).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

COMMAND_TIMEOUT_S = 60.0
UNSCORABLE = 2


def normalise_text(text: str) -> str:
    """Trailing whitespace stripped per line, blank lines at both ends dropped."""
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).strip("\n")


def normalise_answer(text: str) -> str:
    """An answer reduced for comparison: one line, lower case, single spaces, no quotes or final period."""
    text = " ".join(text.strip().split()).lower()
    text = text.strip("`'\" ")
    if text.endswith(".") and not re.fullmatch(r"[\d.]+", text):  # a sentence's period, not a number's
        text = text[:-1].strip("`'\" ")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    return text


def answers_match(given: str, expected: str) -> bool:
    """Normalised equality; numbers compare by value (so "42.0" matches "42")."""
    a, b = normalise_answer(given), normalise_answer(expected)
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def check_qa(spec: dict, workspace: Path) -> float:
    answer = workspace / spec["answer_file"]
    if not answer.is_file():
        return 0.0
    return 1.0 if answers_match(answer.read_text(errors="replace"), spec["expected"]) else 0.0


def _same_file(path: Path, expected: Path) -> bool:
    if not path.is_file():
        return False
    got, want = path.read_bytes(), expected.read_bytes()
    try:
        got_text, want_text = got.decode("utf-8"), want.decode("utf-8")
    except UnicodeDecodeError:
        return got == want
    if path.suffix == ".json":  # the same data in another layout is the same file
        try:
            return json.loads(got_text) == json.loads(want_text)
        except json.JSONDecodeError:
            pass
    return normalise_text(got_text) == normalise_text(want_text)


def tool_calls_made(logs: Path) -> int | None:
    """The rollout's tool-call count: ``HRL_TOOL_CALLS`` (set by this project's rollout worker), else the tool
    calls of the agent's ATIF trajectory that Harbor keeps beside the verifier's logs
    (``LOGS_DIR/../agent/trajectory.json``); None when neither exists."""
    raw = os.environ.get("HRL_TOOL_CALLS", "").strip()
    if raw.isdigit():
        return int(raw)
    trajectory = logs.parent / "agent" / "trajectory.json"
    if not trajectory.is_file():
        return None
    try:
        steps = json.loads(trajectory.read_text()).get("steps") or []
    except (json.JSONDecodeError, AttributeError):
        return None
    return sum(len(step.get("tool_calls") or []) for step in steps if step.get("source") == "agent")


def check_state(spec: dict, workspace: Path, tests: Path, logs: Path) -> float:
    limit = spec.get("max_tool_calls")
    if limit is not None:
        made = tool_calls_made(logs)
        if made is None:
            print(
                "no tool-call count (HRL_TOOL_CALLS or an ATIF trajectory): the budget cannot be checked",
                file=sys.stderr,
            )
            sys.exit(UNSCORABLE)
        if made > int(limit):
            return 0.0
    checks = [_same_file(workspace / rel, tests / "expected" / name) for rel, name in spec["files"].items()]
    checks += [not (workspace / rel).exists() for rel in spec.get("deleted", [])]
    return sum(checks) / len(checks)


def check_command(spec: dict, workspace: Path, tests: Path) -> float:
    try:
        proc = subprocess.run(
            ["bash", str(tests / "command.sh")],
            cwd=workspace,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=COMMAND_TIMEOUT_S,
            env={**os.environ, "LC_ALL": "C", "TZ": "UTC"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 0.0
    if proc.returncode != 0:
        return 0.0
    expected = spec.get("expected_output")
    if expected is None:
        return 1.0
    return 1.0 if normalise_text(proc.stdout.decode(errors="replace")) == normalise_text(expected) else 0.0


def main(argv: list[str]) -> int:
    check_json, workspace, logs = Path(argv[0]), Path(argv[1]), Path(argv[2])
    spec = json.loads(check_json.read_text())
    tests = check_json.parent
    kind = spec["kind"]
    if kind == "qa":
        reward = check_qa(spec, workspace)
    elif kind == "state":
        reward = check_state(spec, workspace, tests, logs)
    elif kind == "command":
        reward = check_command(spec, workspace, tests)
    else:
        print(f"unknown check kind {kind!r}", file=sys.stderr)
        return UNSCORABLE
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "reward.json").write_text(json.dumps({"reward": reward}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
