"""``python -m harness_rl.harnesses check all``, run as a user would run it, passes for all six installed
harnesses: each ran the scripted shell command (its file exists), finished "submitted", and the proxy saw the
dialect its adapter declares."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness_rl.harnesses import HARNESSES

pytestmark = [pytest.mark.slow, pytest.mark.harness]

REPO = Path(__file__).resolve().parents[2]
SIX = ["claude_code", "codex", "hermes", "mini_swe_agent", "opencode", "pi"]


@pytest.fixture(scope="module")
def installed() -> None:
    for name in SIX:
        HARNESSES[name]().install()  # idempotent: a no-op when the pins are installed


def test_check_all_passes_for_the_six(installed):
    done = subprocess.run([sys.executable, "-m", "harness_rl.harnesses", "check", "all"], cwd=REPO,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    print(done.stdout)  # the JSON lines, for the test log
    results = {r["harness"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert sorted(results) == SIX, done.stderr[-3000:]
    for name, r in results.items():
        assert r["ok"] is True, r
        assert r["command_executed"] and r["exit_kind"] == "submitted" and r["error"] is None
        assert r["dialect"] == HARNESSES[name].dialect and r["version"] == HARNESSES[name]().version()
        assert r["requests"] == 2 and r["tool_calls"] >= 1
    assert results["mini_swe_agent"]["streamed"] is False  # litellm without stream
    assert all(results[n]["streamed"] is True for n in ("pi", "opencode", "claude_code", "codex"))
    assert done.returncode == 0
