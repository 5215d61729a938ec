"""Run a harness on this machine: bubblewrap isolation when available, always an address-space cap.

Layout under bwrap (the simplest one that hides what a rollout must not see):

    --ro-bind / /                    the whole host, read-only (harness binaries, interpreters, libraries)
    --dev /dev, --proc /proc         private /dev and a /proc of the new PID namespace
    --bind <tmp> /tmp                the rollout's own /tmp (on disk, so a runaway file does not eat RAM)
    --tmpfs <hidden...>              empty tmpfs over the rollout folder and any caller-given folders (run
                                     folder, task sources, verifier files)
    --ro-bind <readonly...>          what the harness needs from under /tmp or a hidden folder (its venv)
    --bind <path> <path>             workspace, home and harness output folders, writable, on top
    --unshare-pid --die-with-parent --new-session

The network namespace stays shared on purpose: the capture proxy listens on the host's loopback.
``--unshare-pid`` makes the sandbox's first process PID 1 of its namespace, so when bwrap dies (killed at
the wall-clock limit) the kernel kills every process inside, including commands the harness started in
their own sessions (mini-swe-agent runs each command with ``start_new_session``).

Without bwrap the process runs as a plain subprocess (a warning is logged once). In both modes every
process carries a per-run marker in its environment; after the run, any process still carrying it is
killed, so nothing the rollout started outlives it.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

import psutil

from harness_rl.sandbox.base import ProcessResult, SandboxClosedError, SandboxLayout

logger = logging.getLogger(__name__)

#: Environment variable whose value identifies the processes of one sandboxed run.
RUN_MARKER_ENV = "HARNESS_RL_SANDBOX_RUN"

#: Default address-space cap. A sampled `yes` once grew a harness to ~20 GB before the kernel killed it.
#: mini-swe-agent runs normally under 0.75 GiB; 2 GiB leaves headroom while three runaway rollouts in
#: parallel still fit a 24 GiB machine. Node/Bun harnesses reserve far more virtual memory than they use
#: and will need a larger cap of their own.
DEFAULT_ADDRESS_SPACE_BYTES = 2 << 30

_RLIMIT_SHIM = (
    "import os,resource,sys;n=int(sys.argv[1]);resource.setrlimit(resource.RLIMIT_AS,(n,n));"
    "os.execvp(sys.argv[2],sys.argv[2:])"
)


@functools.cache
def bwrap_usable() -> bool:
    """Whether ``bwrap`` exists and can create the namespaces we use (containers may forbid them)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    probe = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
             "--die-with-parent", "--new-session", "true"]  # fmt: skip
    try:
        done = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if done.returncode != 0:
        logger.warning("bwrap is installed but unusable here: %s", done.stderr.decode(errors="replace").strip())
    return done.returncode == 0


@functools.cache
def _warn_unisolated_once() -> None:
    logger.warning(
        "bubblewrap (bwrap) is unavailable or disabled: rollouts run as plain subprocesses without "
        "filesystem isolation (install it with `apt-get install -y bubblewrap`)."
    )


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A minimal environment for a harness: PATH and locale only, so no secret of ours leaks into it."""
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "LANG": "C.UTF-8", "TERM": "dumb"}
    env.update(extra or {})
    return env


class LocalSandbox:
    """Runs processes on the local machine.

    Args:
        address_space_bytes: ``RLIMIT_AS`` for the process and all its children (None: no cap).
        use_bwrap: True to require bubblewrap, False to never use it, None to use it when usable.
        hidden_paths: Folders every run must not see besides the layout's own hidden ones (e.g. the run
            folder, task sources, verifier files). Ignored without bwrap.
        kill_grace_s: Seconds between SIGTERM and SIGKILL when a run is stopped.
        niceness: Scheduling niceness of the run (``nice -n``). On a machine the engine and the trainer
            share with the harnesses, a positive value keeps harness start-up (Python imports, Node) from
            starving the optimizer step; 0 leaves the priority alone. It is paid in start-up: measured with
            ``python -m benchmarks.rollout_phases --compare budget.niceness=0`` (mini-swe-agent, 4 at once on 2
            busy cores), harness start-up took 24.3 s per rollout at 10 and 15.6 s at 0.
    """

    def __init__(
        self,
        *,
        address_space_bytes: int | None = DEFAULT_ADDRESS_SPACE_BYTES,
        use_bwrap: bool | None = None,
        hidden_paths: Sequence[Path] = (),
        kill_grace_s: float = 3.0,
        niceness: int = 0,
    ) -> None:
        if use_bwrap and not bwrap_usable():
            raise RuntimeError("use_bwrap=True but bwrap is missing or unusable (apt-get install -y bubblewrap)")
        self._bwrap = bwrap_usable() if use_bwrap is None else use_bwrap
        self.address_space_bytes = address_space_bytes
        self.hidden_paths = tuple(Path(p).resolve() for p in hidden_paths)
        self.kill_grace_s = kill_grace_s
        self.niceness = niceness
        # Runs in flight (from any thread), so a shutdown can stop them at once instead of waiting for
        # their wall-clock limits.
        # marker -> (main process, the run's layout): what terminate_all and terminate_under stop.
        self._live: dict[str, tuple[subprocess.Popen, SandboxLayout]] = {}
        self._live_lock = threading.Lock()
        self._closed = False

    @property
    def isolation(self) -> str:
        """``"bwrap"`` or ``"none"``."""
        return "bwrap" if self._bwrap else "none"

    def command(self, argv: Sequence[str], layout: SandboxLayout) -> list[str]:
        """The full command line: address-space cap, then bwrap (if used), then ``argv``."""
        cmd: list[str] = ["nice", "-n", str(self.niceness)] if self.niceness else []
        if self.address_space_bytes is not None:
            if shutil.which("prlimit"):
                cmd += ["prlimit", f"--as={self.address_space_bytes}", "--"]
            else:  # util-linux missing: same cap through a tiny exec shim
                cmd += [sys.executable, "-c", _RLIMIT_SHIM, str(self.address_space_bytes)]
        if self._bwrap:
            cmd += self._bwrap_args(layout) + ["--"]
        return cmd + list(argv)

    def _bwrap_args(self, layout: SandboxLayout) -> list[str]:
        args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        # /tmp first: rollout folders may live under /tmp (tests), and a later bind of /tmp would cover
        # the tmpfs and binds below.
        args += ["--bind", str(layout.tmp), "/tmp"]
        # The private /tmp hides whatever lives under the host's /tmp; a checkout cloned there (CI) still
        # needs its package files (harness configs) and interpreter, so put those back read-only.
        for path in _parents_first({p for p in _host_paths_needed() if _is_under(p, Path("/tmp"))}):
            args += ["--ro-bind", str(path), str(path)]
        for path in _parents_first({*layout.hidden, *self.hidden_paths}):
            args += ["--tmpfs", str(path)]
        for path in _parents_first(set(layout.readonly)):
            args += ["--ro-bind", str(path), str(path)]
        for path in _parents_first({layout.workspace, layout.home, *layout.writable}):
            args += ["--bind", str(path), str(path)]
        args += ["--chdir", str(layout.workspace), "--unshare-pid", "--die-with-parent", "--new-session"]
        return args

    def run(
        self,
        argv: Sequence[str],
        layout: SandboxLayout,
        *,
        env: Mapping[str, str],
        timeout_s: float,
        stdout: IO[bytes] | None = None,
        stderr: IO[bytes] | None = None,
    ) -> ProcessResult:
        """Run ``argv`` in the sandbox; see ``Sandbox.run``."""
        if not self._bwrap:
            _warn_unisolated_once()
        layout.create()
        marker = uuid.uuid4().hex
        full_env = dict(env)
        full_env.update(
            {
                "HOME": str(layout.home),
                "TMPDIR": "/tmp" if self._bwrap else str(layout.tmp),
                RUN_MARKER_ENV: marker,
            }
        )
        start = time.monotonic()
        # Started and registered under the lock that terminate_all takes, so a rollout thread that reaches
        # this point during a shutdown cannot start a harness after the shutdown stopped the others (it
        # would then run to its wall-clock limit while the run waits for it).
        with self._live_lock:
            if self._closed:
                raise SandboxClosedError("the sandbox is shut down (terminate_all ran); no new run is started")
            proc = subprocess.Popen(
                self.command(argv, layout),
                cwd=layout.workspace,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,  # its own process group, so the whole group can be signalled
            )
            self._live[marker] = (proc, layout)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._terminate(proc)
        finally:
            with self._live_lock:
                self._live.pop(marker, None)
        returncode = proc.wait()
        seconds = time.monotonic() - start
        # bwrap can exit while its PID namespace's init (still in this process group) is tearing the namespace
        # down; the marker scan below cannot read an exiting process's environment, so wait on the group too.
        _wait_group_gone(proc.pid, timeout_s=self.kill_grace_s)
        killed = _kill_marked(marker, grace_s=self.kill_grace_s)
        if killed:
            logger.info("killed %d leftover process(es) of a sandboxed run: %s", len(killed), killed)
        return ProcessResult(returncode, timed_out, seconds, self.isolation, killed)

    def terminate_all(self) -> list[int]:
        """Stop every run in flight and whatever it started; called on shutdown (error, Ctrl-C, SIGTERM).
        Later ``run`` calls raise SandboxClosedError.

        Returns:
            PIDs of the runs' main processes that were stopped.
        """
        with self._live_lock:
            self._closed = True
            live = [(marker, proc) for marker, (proc, _) in self._live.items()]
        return self._stop_runs(live)

    def terminate_under(self, folder: Path) -> list[int]:
        """Stop the runs in flight whose rollout folder lies inside ``folder`` (one cancelled group), and
        whatever they started; other runs go on and later runs still start.

        Returns:
            PIDs of the runs' main processes that were stopped.
        """
        folder = Path(folder).resolve()
        with self._live_lock:
            live = [
                (marker, proc)
                for marker, (proc, layout) in self._live.items()
                if layout.home.resolve().is_relative_to(folder)  # every layout's HOME is inside its rollout folder
            ]
        return self._stop_runs(live)

    def _stop_runs(self, live: list[tuple[str, subprocess.Popen]]) -> list[int]:
        for marker, proc in live:
            self._terminate(proc)
            _kill_marked(marker, grace_s=self.kill_grace_s)
        return [proc.pid for _, proc in live]

    def _terminate(self, proc: subprocess.Popen) -> None:
        """SIGTERM the process group and every descendant, then SIGKILL whatever is left after the grace."""
        try:
            descendants = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            descendants = []
        for sig, wait_s in ((signal.SIGTERM, self.kill_grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            _signal_all(descendants, sig)
            try:
                # The main process is reaped by Popen, never by psutil, so its returncode stays known.
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
            descendants = _wait_gone(descendants, wait_s)
            if not descendants:
                return


def _signal_all(procs: list[psutil.Process], sig: int) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until the processes are gone; zombies count as gone (in a container PID 1 may never reap them)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def _wait_group_gone(pgid: int, *, timeout_s: float) -> None:
    """SIGKILL what is left of process group ``pgid`` and wait until none of it runs (zombies count as gone)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return  # the group is empty
    except PermissionError:
        pass
    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                members.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    _wait_gone(members, timeout_s)


def _host_paths_needed() -> set[Path]:
    """The project checkout and the running interpreter's prefix (both needed inside every sandbox)."""
    project_root = Path(__file__).resolve().parents[2]
    return {project_root, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}


def _is_under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _parents_first(paths: set[Path]) -> list[Path]:
    return sorted(paths, key=lambda p: (len(p.parts), str(p)))


def _kill_marked(marker: str, *, grace_s: float) -> list[int]:
    """Kill every process whose environment carries this run's marker; returns their PIDs."""
    found = []
    for p in psutil.process_iter():
        try:
            if (
                p.pid != os.getpid()
                and p.status() != psutil.STATUS_ZOMBIE
                and p.environ().get(RUN_MARKER_ENV) == marker
            ):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    _signal_all(found, signal.SIGKILL)
    _wait_gone(found, grace_s)
    return [p.pid for p in found]
