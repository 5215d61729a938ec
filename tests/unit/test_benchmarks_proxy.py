"""The proxy benchmark runs end to end in a tiny configuration, stops its child processes, and reports finite,
positive numbers in the documented format (no timing thresholds: timings depend on the machine)."""

import math
import re
import subprocess
import sys
from pathlib import Path

import psutil

from benchmarks.proxy.procs import core_plan

REPO = Path(__file__).resolve().parents[2]

FINAL_LINE = re.compile(r"^proxy_overhead_p50_ms=(\S+) throughput_ratio=(\S+) stream_ttft_ratio=(\S+)$")


def test_bench_tiny_run_reports_finite_numbers():
    argv = ["--turns", "3", "--many", "4", "--rounds", "1", "--repeats", "2", "--token-delay-ms", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.proxy", *argv, "--graph-calls", "20"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,  # benchmarks/ is a top-level package of the checkout, not installed
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()

    match = FINAL_LINE.match(lines[-1])
    assert match, lines[-1]
    overhead, throughput_ratio, ttft_ratio = (float(x) for x in match.groups())
    assert math.isfinite(overhead)  # a difference of two p50s: its sign is the machine's business
    assert math.isfinite(throughput_ratio) and throughput_ratio > 0
    assert math.isfinite(ttft_ratio) and ttft_ratio > 0

    out = result.stdout
    assert re.search(r"upstream: pid \d+, http://127\.0\.0\.1:\d+, cores \[", out)
    assert re.search(r"proxy: pid \d+, http://127\.0\.0\.1:\d+, cores \[", out)
    assert "engine pacing: 1 ms before each streamed token" in out
    rows = [line for line in lines if re.match(r"^│\s*(direct|proxy)\s*│", line)]
    assert len(rows) == 8  # {direct, proxy} x {1, many sessions} x {streaming, not}
    for row in rows:
        cells = [c.strip() for c in row.strip("│").split("│")]
        calls, rps, p50, p99 = int(cells[3]), float(cells[4]), float(cells[5]), float(cells[6])
        assert calls == (3 * 2 if cells[1] == "1" else 3 * 4)
        assert rps > 0 and 0 < p50 <= p99
        if cells[2] == "yes":
            assert 0 < float(cells[7]) <= float(cells[8])
    assert re.search(r"4 finished sessions \(trace fetched, not ended\) hold -?\d+ KB each", out)
    assert "20/20 calls linked to their parent" in out

    # The upstream and the proxy were stopped by their PIDs before the benchmark exited.
    pids = [int(pid) for pid in re.findall(r"^(?:upstream|proxy): pid (\d+)", out, flags=re.M)]
    assert len(pids) == 2
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


def test_core_plan_gives_the_proxy_its_own_core_when_there_are_two():
    assert core_plan([0, 1]) == {"upstream": {0}, "proxy": {1}, "loadgen": {0}}
    assert core_plan([0, 1, 2, 3]) == {"upstream": {0}, "proxy": {1}, "loadgen": {2}}
    assert core_plan([5]) == {"upstream": {5}, "proxy": {5}, "loadgen": {5}}
