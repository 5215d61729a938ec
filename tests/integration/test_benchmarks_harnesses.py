"""``python -m benchmarks.harnesses`` runs concurrent sessions of a real harness (mini-swe-agent: its
sessions last seconds, so the memory sampler sees them) through the proxy and prints its summary as one JSON
object on stdout, with the table on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harnesses.throughput import BenchResult
from harness_rl.harnesses import HARNESSES

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.harness]


def test_two_sessions_print_one_json_summary():
    HARNESSES["mini_swe_agent"]().install()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.harnesses", "--harness", "mini_swe_agent", "--sessions", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,  # benchmarks/ is a top-level package of the checkout, not installed
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert set(result) == set(BenchResult.__dataclass_fields__)
    assert result["harness"] == "mini_swe_agent" and result["sessions"] == 2 and result["ok"] == 2
    assert result["exit_kinds"] == {"submitted": 2} and result["errors"] == []
    assert result["peak_concurrent"] in (1, 2) and result["concurrency"] == 2
    assert result["sessions_per_minute"] == pytest.approx(2 / result["wall_s"] * 60, rel=0.01)
    assert result["peak_harness_rss_mib"] > 0 and result["peak_processes"] >= 1
    assert result["available_min_mib"] <= result["available_start_mib"]
    assert "sessions/minute" in done.stderr and "mini_swe_agent: 2 sessions" in done.stderr
