"""Child processes of the benchmark: started pinned to chosen cores, their PIDs recorded, stopped exactly."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import time

import psutil


def core_plan(cores: list[int]) -> dict[str, set[int]]:
    """Which cores the upstream, the proxy and the load generator get.

    With three or more cores each gets its own. With two, the proxy gets one to itself and the upstream
    shares the other with the load generator: the proxy is what is measured, and both the direct and the
    proxied runs pay the same upstream and client costs on the shared core.
    """
    if len(cores) >= 3:
        return {"upstream": {cores[0]}, "proxy": {cores[1]}, "loadgen": {cores[2]}}
    if len(cores) == 2:
        return {"upstream": {cores[0]}, "proxy": {cores[1]}, "loadgen": {cores[0]}}
    return {"upstream": set(cores), "proxy": set(cores), "loadgen": set(cores)}


class PinnedServer:
    """A server child process pinned to `cores` that prints its URL as its first stdout line.

    It runs in its own session, so a Ctrl-C in the terminal reaches only the benchmark, which then stops
    this exact PID.
    """

    def __init__(self, name: str, argv: list[str], cores: set[int], env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.cores = cores
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self._stderr = tempfile.TemporaryFile()

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} not started")
        return self.proc.pid

    def start(self, timeout_s: float = 30.0) -> PinnedServer:
        cores = self.cores
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=self.env,
            start_new_session=True,
            # Set before exec so that every thread the server starts inherits the affinity.
            preexec_fn=lambda: os.sched_setaffinity(0, cores),
        )
        deadline = time.monotonic() + timeout_s
        assert self.proc.stdout is not None
        while time.monotonic() < deadline and self.proc.poll() is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                self.url = self.proc.stdout.readline().decode().strip()
                break
        if not self.url.startswith("http://"):
            self.stop()
            raise RuntimeError(f"{self.name} did not start: {self.stderr_tail()}")
        return self

    def stderr_tail(self, n_bytes: int = 4000) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-n_bytes:]

    def ps(self) -> psutil.Process:
        return psutil.Process(self.pid)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time; only this PID."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout_s)


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]
