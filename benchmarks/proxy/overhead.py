"""Benchmark: the capture proxy against calling the engine directly, with a fast scripted engine.

    python -m benchmarks.proxy [--turns 20] [--many 144] [--rounds 2] [--token-delay-ms 5]

Starts the fake vLLM's fast mode (harness_rl/testkit/fake_vllm/fast.py) and the proxy (`python -m
harness_rl.proxy serve`) as child processes pinned to their own cores where the machine has them, and drives
agent-like sessions (benchmarks/proxy/load.py) from this process, directly and through the proxy side by side:

- 1 session, non-streaming and streaming: direct and proxied calls alternate turn by turn;
- `--many` concurrent sessions, non-streaming and streaming: direct and proxied rounds alternate.

It prints requests/s, p50/p99 latency, time to first token, each process's CPU use, the proxy's memory per
finished session (and after the sessions are ended), the graph linking time of a 500-call session, and last
`proxy_overhead_p50_ms=X throughput_ratio=Y stream_ttft_ratio=Z`: X the p50 latency the proxy adds at one
session (non-streaming), Y proxied over direct requests/s at `--many` sessions (streaming), Z the p50 time to
first token through the proxy over direct at one session (streaming).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import psutil
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.proxy.graph import time_graph_linking
from benchmarks.proxy.load import AgentSession, CallRecord, SessionShape, Target
from benchmarks.proxy.procs import PinnedServer, core_plan, python_module

MODEL = "bench-model"
TOKEN_ENV = "HARNESS_RL_ADMIN_TOKEN"


@dataclass
class Row:
    """One measured configuration of one target."""

    target: str
    sessions: int
    stream: bool
    calls: int
    wall_s: float
    latencies_s: list[float]
    ttfts_s: list[float]
    cpu: dict[str, float]  # process name -> CPU use over the run (1.0 = one core)
    proxy_cpu_s: float  # CPU seconds the proxy spent on these calls (robust to a busy machine, unlike wall time)

    @property
    def rps(self) -> float:
        return self.calls / self.wall_s

    def p(self, q: float, ttft: bool = False) -> float:
        values = self.ttfts_s if ttft else self.latencies_s
        return float(np.percentile(values, q)) * 1000.0 if values else float("nan")


class CpuMeter:
    """CPU seconds used by the benchmark's processes between start() and stop()."""

    def __init__(self, processes: dict[str, psutil.Process]) -> None:
        self.processes = processes
        self._t0 = 0.0
        self._cpu0: dict[str, float] = {}
        self.seconds: dict[str, float] = {}

    @staticmethod
    def _cpu(p: psutil.Process) -> float:
        times = p.cpu_times()
        return times.user + times.system

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._cpu0 = {name: self._cpu(p) for name, p in self.processes.items()}

    def stop(self) -> dict[str, float]:
        wall = time.perf_counter() - self._t0
        self.seconds = {name: self._cpu(p) - self._cpu0[name] for name, p in self.processes.items()}
        return {name: used / wall for name, used in self.seconds.items()}


class Bench:
    """The measurement phases, run inside one event loop against the two targets."""

    def __init__(self, args: argparse.Namespace, direct: Target, proxy: Target, meter: CpuMeter, progress: Progress):
        self.args = args
        self.direct = direct
        self.proxy = proxy
        self.meter = meter
        self.progress = progress
        self.shape = SessionShape(turns=args.turns, tool_words=args.tool_words, system_words=args.system_words)
        self._seed = 0
        self.retries = 0

    def _next_seed(self) -> int:
        self._seed += 1
        return self._seed

    def _task(self, label: str, total: int) -> Callable[[], None]:
        task = self.progress.add_task(label, total=total)
        return lambda: self.progress.advance(task)

    async def warm_up(self) -> None:
        shape = SessionShape(turns=2, system_words=50, task_words=10, tool_words=20)
        for target in (self.direct, self.proxy):
            for stream in (False, True):
                await AgentSession(target, shape, stream, seed=self._next_seed()).run()

    async def single(self, stream: bool) -> tuple[Row, Row]:
        """One session at a time; direct and proxied calls alternate turn by turn (order flips each turn)."""
        records: dict[str, list[CallRecord]] = {"direct": [], "proxy": []}
        tick = self._task(
            f"1 session, {'streaming' if stream else 'non-streaming'}", 2 * self.shape.turns * self.args.repeats
        )
        self.meter.start()
        for _ in range(self.args.repeats):
            seed = self._next_seed()
            pair = [AgentSession(t, self.shape, stream, seed=seed) for t in (self.direct, self.proxy)]
            for session in pair:
                await session.start()
            for turn in range(self.shape.turns):
                for session in pair if turn % 2 == 0 else pair[::-1]:
                    await session.step()
                    tick()
            for session in pair:
                await session.finish()
                records[session.target.name] += session.records
                self.retries += session.retries
        cpu = self.meter.stop()
        # One call at a time: each target's busy time is the sum of its calls' latencies.
        proxy_cpu = {"direct": float("nan"), "proxy": self.meter.seconds["proxy"]}
        rows = (
            _row(name, 1, stream, recs, sum(r.latency_s for r in recs), cpu, proxy_cpu[name])
            for name, recs in records.items()
        )
        return tuple(rows)  # type: ignore[return-value]

    async def concurrent(self, stream: bool) -> tuple[Row, Row]:
        """`--many` sessions at once; whole direct and proxied rounds alternate."""
        n = self.args.many
        per_target: dict[str, list[Row]] = {"direct": [], "proxy": []}
        tick = self._task(
            f"{n} sessions, {'streaming' if stream else 'non-streaming'}", 2 * n * self.shape.turns * self.args.rounds
        )
        for _ in range(self.args.rounds):
            for target in (self.direct, self.proxy):
                sessions = [AgentSession(target, self.shape, stream, seed=self._next_seed()) for _ in range(n)]
                self.meter.start()
                t0 = time.perf_counter()
                await asyncio.gather(*(s.run(on_call=tick) for s in sessions))
                wall = time.perf_counter() - t0
                cpu = self.meter.stop()
                self.retries += sum(s.retries for s in sessions)
                per_target[target.name].append(
                    _row(
                        target.name,
                        n,
                        stream,
                        [r for s in sessions for r in s.records],
                        wall,
                        cpu,
                        self.meter.seconds["proxy"] if target.proxied else float("nan"),
                    )
                )
        return tuple(_merge(rows) for rows in per_target.values())  # type: ignore[return-value]

    async def memory(self, proxy_process: psutil.Process) -> dict[str, float]:
        """Proxy RSS growth per finished session (trace fetched), after DELETE, and after a second batch."""
        n = self.args.many
        rss = {"base": proxy_process.memory_info().rss}
        for batch in (1, 2):
            tick = self._task(f"memory: batch {batch} of {n} proxied sessions", n * self.shape.turns)
            sessions = [AgentSession(self.proxy, self.shape, False, seed=self._next_seed()) for _ in range(n)]

            await asyncio.gather(*(self._drive_unended(s, tick) for s in sessions))
            rss[f"held_{batch}"] = proxy_process.memory_info().rss
            await asyncio.gather(*(s.end() for s in sessions))
            rss[f"ended_{batch}"] = proxy_process.memory_info().rss
        return rss

    async def _drive_unended(self, session: AgentSession, tick: Callable[[], None]) -> None:
        """Runs a proxied session and fetches its trace, but leaves it registered."""
        await session.start()
        for _ in range(self.shape.turns):
            await session.step()
            tick()
        await session.fetch_trace()


def _row(
    name: str,
    sessions: int,
    stream: bool,
    records: list[CallRecord],
    wall: float,
    cpu: dict[str, float],
    proxy_cpu_s: float,
) -> Row:
    return Row(
        target=name,
        sessions=sessions,
        stream=stream,
        calls=len(records),
        wall_s=wall,
        latencies_s=[r.latency_s for r in records],
        ttfts_s=[r.ttft_s for r in records if r.ttft_s is not None],
        cpu=cpu,
        proxy_cpu_s=proxy_cpu_s,
    )


def _merge(rows: list[Row]) -> Row:
    wall = sum(r.wall_s for r in rows)
    cpu = {k: sum(r.cpu[k] * r.wall_s for r in rows) / wall for k in rows[0].cpu}
    return Row(
        target=rows[0].target,
        sessions=rows[0].sessions,
        stream=rows[0].stream,
        calls=sum(r.calls for r in rows),
        wall_s=wall,
        latencies_s=[x for r in rows for x in r.latencies_s],
        ttfts_s=[x for r in rows for x in r.ttfts_s],
        cpu=cpu,
        proxy_cpu_s=sum(r.proxy_cpu_s for r in rows),
    )


def _results_table(rows: list[Row]) -> Table:
    table = Table(title="proxy vs direct (latencies in ms; CPU in cores)")
    for col in ("target", "sessions", "stream", "calls", "req/s", "p50", "p99", "TTFT p50", "TTFT p99"):
        table.add_column(col, justify="right")
    for col in ("CPU upstream", "CPU proxy", "CPU loadgen", "proxy CPU ms/call"):
        table.add_column(col, justify="right")
    for r in rows:
        ttft = (f"{r.p(50, True):.2f}", f"{r.p(99, True):.2f}") if r.stream else ("-", "-")
        table.add_row(
            r.target,
            str(r.sessions),
            "yes" if r.stream else "no",
            str(r.calls),
            f"{r.rps:.1f}",
            f"{r.p(50):.2f}",
            f"{r.p(99):.2f}",
            *ttft,
            *(f"{r.cpu[k]:.2f}" for k in ("upstream", "proxy", "loadgen")),
            "-" if r.proxy_cpu_s != r.proxy_cpu_s else f"{r.proxy_cpu_s / r.calls * 1000:.3f}",
        )
    return table


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.proxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="calls per agent session")
    parser.add_argument("--many", type=int, default=144, help="concurrent sessions in the throughput runs")
    parser.add_argument("--rounds", type=int, default=2, help="alternating direct/proxied rounds per throughput run")
    parser.add_argument("--repeats", type=int, default=5, help="sessions per target in the one-session runs")
    parser.add_argument("--system-words", type=int, default=400, help="system prompt size in tokens")
    parser.add_argument("--tool-words", type=int, default=150, help="tokens per tool result")
    parser.add_argument(
        "--token-delay-ms", type=float, default=5.0, help="engine pacing: pause before each streamed token"
    )
    parser.add_argument("--graph-calls", type=int, default=500, help="calls in the graph-linking measurement")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Console(highlight=False, width=160)
    err = Console(stderr=True)
    plan = core_plan(sorted(os.sched_getaffinity(0)))
    os.sched_setaffinity(0, plan["loadgen"])
    token = secrets.token_urlsafe(16)
    upstream = PinnedServer(
        "upstream",
        python_module("harness_rl.testkit.fake_vllm.fast", "--port", "0", "--token-delay-ms", str(args.token_delay_ms)),
        plan["upstream"],
    )
    proxy = PinnedServer(
        "proxy",
        python_module("harness_rl.proxy", "serve", "--port", "0", "--base-model", MODEL, "--log-level", "warning"),
        plan["proxy"],
        env={**os.environ, TOKEN_ENV: token},
    )
    try:
        upstream.start()
        proxy.argv += ["--engine-url", upstream.url]
        proxy.start()
        out.print(
            f"python {sys.version.split()[0]}, loop {_loop_name()}, {os.cpu_count()} cores visible, "
            f"load average at start {os.getloadavg()[0]:.1f} (other work on the machine skews wall times)"
        )
        for name, server in (("upstream", upstream), ("proxy", proxy)):
            out.print(f"{name}: pid {server.pid}, {server.url}, cores {sorted(plan[name])}")
        out.print(f"loadgen: pid {os.getpid()}, cores {sorted(plan['loadgen'])}")
        out.print(
            f"sessions: {args.turns} turns; system {args.system_words} tokens, each turn adds a reply "
            f"(24 text tokens + a tool call) and a {args.tool_words}-token tool result"
        )
        out.print(
            f"engine pacing: {args.token_delay_ms:g} ms before each streamed token (the first models prefill); "
            "non-streaming replies are immediate"
        )
        rows, rss, retries = _run(args, upstream, proxy, token, err)
    except Exception:
        for server in (upstream, proxy):
            if server.proc is not None:
                err.print(f"{server.name} (pid {server.pid}) stderr:\n{server.stderr_tail()}", markup=False)
        raise
    finally:
        proxy.stop()
        upstream.stop()
    single_ns, single_s, many_ns, many_s = rows
    out.print(_results_table([*single_ns, *single_s, *many_ns, *many_s]))
    _print_memory(out, rss, args.many)
    out.print(f"load average at end {os.getloadavg()[0]:.1f}")
    out.print(f"client calls sent again after a stale pooled connection: {retries}")
    graph = time_graph_linking(
        args.graph_calls, SessionShape(system_words=args.system_words, tool_words=args.tool_words)
    )
    out.print(
        f"graph linking, {args.graph_calls}-call session (final prompt {graph['final_prompt_tokens']} tokens): "
        f"{graph['total_s'] * 1000:.1f} ms total, {graph['mean_ms']:.3f} ms/call mean, "
        f"{graph['max_ms']:.3f} ms/call max, {graph['linked']}/{args.graph_calls} calls linked to their parent"
    )
    overhead = single_ns[1].p(50) - single_ns[0].p(50)
    throughput_ratio = many_s[1].rps / many_s[0].rps
    ttft_ratio = single_s[1].p(50, ttft=True) / single_s[0].p(50, ttft=True)
    print(
        f"proxy_overhead_p50_ms={overhead:.3f} throughput_ratio={throughput_ratio:.3f} "
        f"stream_ttft_ratio={ttft_ratio:.3f}"
    )
    return 0


def _run(args, upstream: PinnedServer, proxy: PinnedServer, token: str, err: Console):
    async def go():
        direct = Target("direct", upstream.url, MODEL)
        proxied = Target("proxy", proxy.url, MODEL, admin_token=token)
        meter = CpuMeter({"upstream": upstream.ps(), "proxy": proxy.ps(), "loadgen": psutil.Process()})
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=err, transient=True) as progress:
            bench = Bench(args, direct, proxied, meter, progress)
            await bench.warm_up()
            # First, on a fresh proxy: later runs leave freed memory in its heap, which hides growth.
            rss = await bench.memory(proxy.ps())
            rows = (
                await bench.single(stream=False),
                await bench.single(stream=True),
                await bench.concurrent(stream=False),
                await bench.concurrent(stream=True),
            )
        return rows, rss, bench.retries

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(go())


def _print_memory(out: Console, rss: dict[str, float], n: int) -> None:
    mb = 1024 * 1024
    base = rss["base"]
    out.print(
        f"proxy memory: RSS {base / mb:.1f} MB before; {n} finished sessions (trace fetched, not ended) hold "
        f"{(rss['held_1'] - base) / mb / n * 1024:.0f} KB each ({(rss['held_1'] - base) / mb:.1f} MB); "
        f"after DELETE {(rss['ended_1'] - base) / mb:.1f} MB above base"
    )
    out.print(
        f"proxy memory, second batch of {n}: held {(rss['held_2'] - base) / mb:.1f} MB above base, "
        f"after DELETE {(rss['ended_2'] - base) / mb:.1f} MB above base "
        f"({(rss['ended_2'] - base) / (2 * n) / 1024:.0f} KB per ended session over both batches)"
    )


def _loop_factory():
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _loop_name() -> str:
    return "uvloop" if _loop_factory() is not None else "asyncio"


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
