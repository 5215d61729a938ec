"""Process-watching helpers for tests that assert nothing outlives a run (they observe; they never kill)."""

from __future__ import annotations

import threading
import time

import psutil


class DescendantWatcher:
    """Records the PIDs of descendants of this test process that appear while a run is in flight.

    Descendants alive before the watch began (the session-wide vLLM engine, say) are not the run's and are
    ignored, so the check stays meaningful whatever other fixtures are running.
    """

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.preexisting: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            self.pids.update(p.pid for p in me.children(recursive=True) if p.pid not in self.preexisting)
            time.sleep(0.05)

    def __enter__(self) -> DescendantWatcher:
        self.preexisting = {p.pid for p in psutil.Process().children(recursive=True)}
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def alive(self) -> list[int]:
        """Recorded PIDs still running (zombies count as gone: PID 1 of a container may never reap them)."""
        out = []
        for pid in self.pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.NoSuchProcess:
                pass
        return out


def processes_mentioning(marker: str) -> list[psutil.Process]:
    """Live processes whose command line contains ``marker`` (to assert on, never to kill)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
