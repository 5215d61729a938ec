"""``python -m benchmarks.safety``: per-call inspection latency of the safety gate over the labelled corpus.

Runs every call of ``benchmarks/data/safety_corpus.jsonl`` (or ``--corpus``) through the gate ``--repeat``
times after one warm-up pass and prints latency percentiles; the last line is ``p99_ms=X`` (wall clock).
The thread's CPU time per call is printed too: on a loaded, shared machine the wall-clock tail mostly measures
waiting for a core, and the CPU time shows what the gate itself costs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from harness_rl.safety.__main__ import context_of
from harness_rl.safety.gate import SafetyGate
from harness_rl.safety.presets import preset

DEFAULT_CORPUS = Path(__file__).parent / "data" / "safety_corpus.jsonl"


def measure(corpus: Path, repeat: int, mode: str) -> tuple[list[float], list[float]]:
    """Per-call wall-clock and thread-CPU latencies in milliseconds (``repeat`` timed passes over the corpus)."""
    records = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    gate = SafetyGate(preset(mode))
    calls = [(r.get("harness"), r["tool"], r["arguments"], context_of(r, "/testbed")) for r in records]
    for call in calls:
        gate.inspect(*call)
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(repeat):
        for call in calls:
            start_cpu = time.thread_time()
            start = time.perf_counter()
            gate.inspect(*call)
            wall.append((time.perf_counter() - start) * 1000.0)
            cpu.append((time.thread_time() - start_cpu) * 1000.0)
    return wall, cpu


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    index = min(len(sorted_values) - 1, max(0, round(q / 100.0 * len(sorted_values)) - 1))
    return sorted_values[index]


def main(argv: list[str] | None = None) -> int:
    """Entry point; prints the percentiles, ending with ``p99_ms=X``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.safety", description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--mode", default="on", choices=("on", "strict"))
    args = parser.parse_args(argv)
    wall, cpu = (sorted(v) for v in measure(args.corpus, args.repeat, args.mode))
    print(f"calls={len(wall)} mode={args.mode} mean_ms={sum(wall) / len(wall):.4f}")
    for q in (50, 90, 95, 99, 99.9):
        print(f"p{q}_ms={percentile(wall, q):.4f} cpu_p{q}_ms={percentile(cpu, q):.4f}")
    print(f"max_ms={wall[-1]:.4f} cpu_max_ms={cpu[-1]:.4f}")
    print(f"p99_ms={percentile(wall, 99):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
