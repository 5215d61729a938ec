"""Score a repository task from pytest's per-test outcomes, never from its exit code alone.

pytest imports the agent's code, so the agent's code runs inside the verifier's pytest: an ``os._exit(0)`` in
the package's ``__init__`` (or anywhere collection reaches) ends pytest with status 0 before any test ran. The
reward therefore comes from the ``-rA`` short summary: 1.0 only when every selected test is reported PASSED,
none is reported failed or erroring, at least one was selected, and pytest also exited 0.

This file is copied verbatim into each repository task's ``tests/score.py`` and run by its ``test.sh`` with
the task's interpreter in isolated mode (``python -I``), so it uses the standard library only and imports
nothing from this project (an exported task runs under Harbor without it). The build-time test runs
(``repo_tests``) parse reports with the same ``parse_report``, so build and verifier agree on what passed.

Usage: ``python -I score.py PYTEST_LOG SELECTED_TXT PYTEST_EXIT_STATUS`` prints ``{"reward": x}``.

What it cannot stop: code that runs inside pytest can print a forged summary; it would have to read the
selected ids at verification time and print them in pytest's format, a targeted forgery the safety gate and
the trajectory review are there to catch.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable

_TAGS = ("PASSED", "FAILED", "ERROR", "SUBFAILED")


def parse_report(output: str, known: Iterable[str] | None = None) -> tuple[set[str], set[str]]:
    """Passed and failed node ids from pytest's ``-rA`` short summary.

    Args:
        output: pytest's output.
        known: Node ids that may appear; a failure line's id is the longest known id it starts with (its
            message follows after " - ", and ids themselves may hold " - "). None: ids end at " - ".
    """
    known = sorted(known or (), key=len, reverse=True)
    passed, failed = set(), set()
    for line in output.splitlines():
        tag, _, rest = line.partition(" ")
        base = tag.split("(")[0]
        if base not in _TAGS:
            continue
        if base == "PASSED":
            passed.add(rest)
            continue
        node = next((k for k in known if rest == k or rest.startswith(k + " - ")), None)
        failed.add(node or rest.split(" - ")[0])
    return passed - failed, failed


def reward(output: str, selected: list[str], exit_status: int) -> float:
    """1.0 when every selected test passed (and at least one was selected and pytest exited 0), else 0.0."""
    if not selected or exit_status != 0:
        return 0.0
    passed, failed = parse_report(output, selected)
    return 1.0 if set(selected) <= passed and not failed else 0.0


def main(argv: list[str]) -> None:
    log, selected_txt, status = argv
    with open(log, errors="replace") as f:
        output = f.read()
    with open(selected_txt) as f:
        selected = [line.rstrip("\n") for line in f if line.strip()]
    print(json.dumps({"reward": reward(output, selected, int(status))}))


if __name__ == "__main__":
    main(sys.argv[1:])
