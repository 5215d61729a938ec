"""``python -m benchmarks.harnesses --harness NAME --sessions N``: how many rollouts of one harness per
minute this machine sustains, and how much memory they take at once.

N sessions of the harness run concurrently (at most ``--concurrency`` at a time), each in its own sandboxed
rollout folder, against the real capture proxy in front of a scripted engine that answers instantly: every
conversation gets the harness's own shell-tool call (``echo <token> > out.txt``), then a final answer (the
same script as ``python -m harness_rl.harnesses check``). What is measured is the harness side alone: process
start-up, its own client, tools and sandbox, and the proxy.

While they run, a sampler adds up the RSS of every process below this one (the sandboxes and harness process
trees; the proxy and scripted engine are threads of this process, reported apart) and tracks the machine's
lowest available memory. RSS counts shared pages once per process, so its sum is an upper bound; the drop in
available memory is what the machine really gave. Peaks are sampled, so a spike shorter than the interval can
be missed.

Before each launch the bench waits while available memory is under ``--min-available-mib`` and another session
is still running, so a harness too big for N at once degrades to fewer concurrent sessions instead of pushing
the machine into the OOM killer; ``peak_concurrent`` in the result says how many actually ran together.

Output: a progress bar and a summary table on stderr, one JSON object on stdout (see ``BenchResult``).
The exit status is 1 when any session did not run its command and finish ``submitted``.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.harnesses.memory import MemorySampler
from harness_rl.harnesses import HARNESSES
from harness_rl.harnesses.base import Harness, HarnessNotInstalledError
from harness_rl.harnesses.check import scripted_replies
from harness_rl.harnesses.install import install_command
from harness_rl.proxy.server import ProxyServer, UvicornThread
from harness_rl.testkit.fake_vllm import FakeEngine, Reply

logger = logging.getLogger(__name__)

ADMIN_TOKEN = "harness-bench-admin"
MIB = 1 << 20
CHECK_FILE = "out.txt"
TOKEN_PLACEHOLDER = "@SESSION_TOKEN@"
TOKEN_PATTERN = re.compile(r"harness-bench-token-\d+")


class ConversationScriptedEngine(FakeEngine):
    """A FakeEngine whose reply depends on the conversation rather than on arrival order: a request with k
    assistant turns in its history gets ``script[k]`` (then "ok"), so any number of concurrent sessions can
    share one engine and each still follows the whole script. ``TOKEN_PLACEHOLDER`` in a scripted command or
    text becomes the session token (``TOKEN_PATTERN``) that the conversation's instruction carries, so each
    session's command proves that this session, not another, ran it."""

    def __init__(self, script: list[Reply], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.script = list(script)

    async def _chat(self, request: Any) -> Any:
        body = await request.json()
        messages = body.get("messages") or []
        turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        found = TOKEN_PATTERN.search(json.dumps(messages))
        token = found.group(0) if found else "no-session-token"
        # FakeEngine takes its next reply right after re-reading the body, which Starlette has cached: nothing
        # is awaited in between, so no other request on the event loop can take this reply.
        self.replies = [_personalize(self.script[turn], token)] if turn < len(self.script) else []
        return await super()._chat(request)


def _personalize(reply: Reply, token: str) -> Reply:
    def fill(value: Any) -> Any:
        return value.replace(TOKEN_PLACEHOLDER, token) if isinstance(value, str) else value

    calls = [(name, {k: fill(v) for k, v in args.items()}) for name, args in reply.tool_calls]
    return Reply(text=fill(reply.text), tool_calls=calls)


@dataclass
class SessionResult:
    """One session of the bench."""

    index: int
    exit_kind: str
    command_executed: bool
    seconds: float
    requests: int
    failures: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.command_executed and self.exit_kind == "submitted" and not self.failures


class _LaunchGate:
    """Spaces launches by ``stagger_s`` and holds one back while available memory is under the floor and
    some other session is running (with none running it goes ahead, so the bench always progresses)."""

    def __init__(self, *, stagger_s: float, min_available_bytes: int) -> None:
        self.stagger_s = stagger_s
        self.min_available_bytes = min_available_bytes
        self.running = 0
        self.peak_running = 0
        self.memory_waits = 0
        self._cond = threading.Condition()
        self._next_launch = 0.0

    def enter(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                if now < self._next_launch:
                    self._cond.wait(self._next_launch - now)
                    continue
                if self.running and psutil.virtual_memory().available < self.min_available_bytes:
                    self.memory_waits += 1
                    self._cond.wait(0.5)
                    continue
                break
            self._next_launch = time.monotonic() + self.stagger_s
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)

    def leave(self) -> None:
        with self._cond:
            self.running -= 1
            self._cond.notify_all()


@dataclass
class BenchResult:
    """The bench's summary (printed as one JSON object).

    Attributes:
        harness: The harness benchmarked.
        sessions: Sessions run.
        concurrency: The cap on concurrent sessions asked for.
        peak_concurrent: Sessions that actually ran at the same time, at most (the memory floor may hold some).
        ok: Sessions that ran the scripted command and finished ``submitted`` with no proxy failure.
        exit_kinds: Count of each exit kind.
        wall_s: Seconds from the first launch to the last session's end.
        sessions_per_minute: ``sessions / wall_s * 60``.
        session_s_median: Median seconds of one session (harness run only).
        session_s_max: Longest session.
        peak_harness_rss_mib: Peak sum of RSS over every process below the bench (sandboxes and harnesses).
        peak_processes: Peak number of such processes.
        bench_process_rss_mib: Peak RSS of the bench process itself (proxy, scripted engine, threads).
        available_start_mib: The machine's available memory before the first launch.
        available_min_mib: Its lowest sampled value during the run.
        memory_used_peak_mib: ``available_start_mib - available_min_mib``.
        memory_waits: Times a launch waited for memory (see ``--min-available-mib``).
        isolation: The sandbox isolation of the runs ("bwrap" or "none").
        errors: Up to five distinct errors of failed sessions.
    """

    harness: str
    sessions: int
    concurrency: int
    peak_concurrent: int
    ok: int
    exit_kinds: dict[str, int]
    wall_s: float
    sessions_per_minute: float
    session_s_median: float
    session_s_max: float
    peak_harness_rss_mib: float
    peak_processes: int
    bench_process_rss_mib: float
    available_start_mib: float
    available_min_mib: float
    memory_used_peak_mib: float
    memory_waits: int
    isolation: str
    errors: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_session(
    harness: Harness, proxy_url: str, admin: httpx.Client, root: Path, index: int, *, timeout_s: float
) -> SessionResult:
    """One rollout of ``harness`` in ``root/<index>``; never raises (a failure is in the result)."""
    token = f"harness-bench-token-{index:03d}"
    workspace, rollout = root / f"{index:03d}" / "ws", root / f"{index:03d}" / "rollout"
    workspace.mkdir(parents=True)
    start = time.monotonic()
    try:
        resp = admin.post("/admin/sessions", json={"adapter": None, "purpose": "train", "max_requests": 10})
        resp.raise_for_status()
        key = resp.json()["key"]
        outcome = harness.run(workspace, f"Write the token {token} into {CHECK_FILE}.", base_url=f"{proxy_url}/v1",
                              api_key=key, step_limit=5, timeout_s=timeout_s, rollout_dir=rollout)  # fmt: skip
        trace = admin.get(f"/admin/sessions/{key}/trace").json()
    except Exception as err:  # reported in the summary: one broken session must not stop the others
        error = f"{type(err).__name__}: {err}"
        return SessionResult(index, "bench_error", False, time.monotonic() - start, 0, 0, error)
    out = workspace / CHECK_FILE
    executed = out.is_file() and out.read_text(errors="replace").strip() == token
    failures = trace.get("failures") or []
    error = outcome.error or (f"proxy failures: {failures[:1]}" if failures else None)
    if not executed and not error:
        error = f"{CHECK_FILE} not written ({outcome.exit_kind}: {outcome.final_message[:200]!r})"
    return SessionResult(index, outcome.exit_kind, executed, outcome.seconds, int(trace.get("requests") or 0),
                         len(failures), error)  # fmt: skip


def bench(
    name: str,
    sessions: int,
    *,
    concurrency: int | None = None,
    timeout_s: float = 300.0,
    stagger_s: float = 0.02,
    min_available_mib: int = 1536,
    sample_interval_s: float = 0.2,
    work_dir: Path | None = None,
    console: Console | None = None,
) -> BenchResult:
    """Run the bench (see the module docstring) and return its summary.

    Args:
        name: A registered harness name.
        sessions: How many sessions to run.
        concurrency: At most this many at once (default: all of them).
        timeout_s: Wall-clock limit of each harness run.
        stagger_s: Seconds between two launches.
        min_available_mib: Hold a launch while the machine has less memory available (and some session runs).
        sample_interval_s: Memory sampling interval.
        work_dir: Where the rollout folders go (default: a temporary folder, removed afterwards).
        console: Where the progress bar goes (default: stderr).

    Raises:
        HarnessNotInstalledError: The harness is not installed.
    """
    harness = HARNESSES[name]()
    if not harness.is_installed():
        raise HarnessNotInstalledError(f"{name} is not installed; install it with: {install_command(name)}")
    concurrency = max(1, min(concurrency or sessions, sessions))
    console = console or Console(stderr=True)
    engine = ConversationScriptedEngine(scripted_replies(harness, f"echo {TOKEN_PLACEHOLDER} > {CHECK_FILE}"))
    gate = _LaunchGate(stagger_s=stagger_s, min_available_bytes=min_available_mib * MIB)
    with (
        tempfile.TemporaryDirectory(prefix=f"harness-bench-{name}-", dir=work_dir) as tmp,
        UvicornThread(engine.app) as engine_server,
        ProxyServer(engine_server.url, ADMIN_TOKEN, base_model=engine.model) as proxy,
        httpx.Client(
            base_url=proxy.url,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            trust_env=False,
            timeout=60,
            limits=httpx.Limits(max_connections=concurrency + 4),
        ) as admin,
        Progress(
            TextColumn(f"[bold]{name}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=console,
        ) as progress,
    ):
        task = progress.add_task(name, total=sessions, status="")

        def one(index: int) -> SessionResult:
            gate.enter()
            try:
                return run_session(harness, proxy.url, admin, Path(tmp), index, timeout_s=timeout_s)
            finally:
                gate.leave()

        results: list[SessionResult] = []
        with MemorySampler(interval_s=sample_interval_s) as memory:
            start = time.monotonic()
            with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="bench") as pool:
                try:
                    for future in as_completed([pool.submit(one, i) for i in range(sessions)]):
                        results.append(future.result())
                        n_ok = sum(r.ok for r in results)
                        status = f"ok {n_ok}  running {gate.running}  rss {memory.peak_children_rss / MIB:,.0f} MiB"
                        progress.update(task, advance=1, status=status)
                except BaseException:  # Ctrl-C: start nothing more and stop the runs in flight, then re-raise
                    pool.shutdown(wait=False, cancel_futures=True)
                    terminate = getattr(harness.sandbox, "terminate_all", None)
                    if terminate is not None:
                        terminate()
                    raise
            wall_s = time.monotonic() - start
    seconds = [r.seconds for r in results]
    return BenchResult(
        harness=name,
        sessions=sessions,
        concurrency=concurrency,
        peak_concurrent=gate.peak_running,
        ok=sum(r.ok for r in results),
        exit_kinds=dict(Counter(r.exit_kind for r in results)),
        wall_s=round(wall_s, 2),
        sessions_per_minute=round(sessions / wall_s * 60, 2),
        session_s_median=round(statistics.median(seconds), 2),
        session_s_max=round(max(seconds), 2),
        peak_harness_rss_mib=round(memory.peak_children_rss / MIB, 1),
        peak_processes=memory.peak_children,
        bench_process_rss_mib=round(memory.peak_self_rss / MIB, 1),
        available_start_mib=round(memory.start_available / MIB, 1),
        available_min_mib=round(memory.min_available / MIB, 1),
        memory_used_peak_mib=round((memory.start_available - memory.min_available) / MIB, 1),
        memory_waits=gate.memory_waits,
        isolation=getattr(getattr(harness, "sandbox", None), "isolation", ""),
        errors=list(dict.fromkeys(r.error for r in results if not r.ok and r.error))[:5],
    )


def print_table(result: BenchResult, console: Console) -> None:
    """The human-readable summary."""
    table = Table(title=f"{result.harness}: {result.sessions} sessions", show_header=False)
    rows = [
        ("sessions ok", f"{result.ok}/{result.sessions}  {result.exit_kinds}"),
        ("concurrency", f"cap {result.concurrency}, peak {result.peak_concurrent}, memory waits {result.memory_waits}"),
        ("wall", f"{result.wall_s:.1f} s  ->  {result.sessions_per_minute:.1f} sessions/minute"),
        ("one session", f"median {result.session_s_median:.1f} s, max {result.session_s_max:.1f} s"),
        ("peak RSS (harness trees)", f"{result.peak_harness_rss_mib:,.0f} MiB over {result.peak_processes} processes"),
        ("peak RSS (bench process)", f"{result.bench_process_rss_mib:,.0f} MiB"),
        (
            "available memory",
            f"{result.available_start_mib:,.0f} -> min {result.available_min_mib:,.0f} MiB "
            f"(used at peak {result.memory_used_peak_mib:,.0f} MiB)",
        ),
        ("isolation", result.isolation),
    ]
    for label, value in rows:
        table.add_row(label, value)
    for error in result.errors:
        table.add_row("error", error[:300])
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harnesses", description=__doc__.split("\n\n")[0])
    parser.add_argument("--harness", required=True, choices=sorted(HARNESSES))
    parser.add_argument("--sessions", type=int, default=48, help="sessions to run (default 48)")
    parser.add_argument("--concurrency", type=int, default=None, help="at most this many at once (default: all)")
    parser.add_argument("--timeout", type=float, default=300.0, help="wall-clock limit of each run, seconds")
    parser.add_argument("--stagger", type=float, default=0.02, help="seconds between two launches")
    parser.add_argument("--min-available-mib", type=int, default=1536,
                        help="hold launches while less memory is available (default 1536)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.sessions < 1:
        parser.error("--sessions must be >= 1")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    console = Console(stderr=True)
    try:
        result = bench(args.harness, args.sessions, concurrency=args.concurrency, timeout_s=args.timeout,
                       stagger_s=args.stagger, min_available_mib=args.min_available_mib, console=console)  # fmt: skip
    except KeyboardInterrupt:
        console.print("interrupted: the runs in flight were stopped")
        return 130
    print_table(result, console)
    print(json.dumps(result.to_dict()), flush=True)
    return 0 if result.ok == result.sessions else 1


if __name__ == "__main__":
    sys.exit(main())
