"""Stop the harness processes of some rollouts (one cancelled group) while the rest of the run goes on.

The sandboxes keep their runs private and can stop them only all at once (``terminate_all``, for shutdown). A
cancelled group needs its own runs stopped, and every sandbox backend starts a rollout's process with
``HOME=<rollout_dir>/home`` (``SandboxLayout.for_rollout``): the local sandbox's process tree inherits it, and the
docker sandbox sets it on the ``docker run`` client, which forwards the signal to its container. So the
processes of a group are the ones whose environment puts HOME under the group's folder; the sandbox's ``run``
then sees its process exit, cleans up what is left by its own marker, and returns.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import psutil

log = logging.getLogger(__name__)


def processes_under(folder: Path) -> list[psutil.Process]:
    """Processes (other than this one) whose HOME lies inside ``folder``."""
    folder = Path(folder).resolve()
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            home = proc.environ().get("HOME")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        if home and Path(home).is_relative_to(folder):
            found.append(proc)
    return found


def stop_processes_under(folder: Path, grace_s: float = 3.0) -> list[int]:
    """SIGTERM every process whose HOME lies inside ``folder``, then SIGKILL those left after ``grace_s``.

    Returns:
        The PIDs signalled.
    """
    procs = processes_under(folder)
    for proc in procs:
        _signal(proc, signal.SIGTERM)
    for proc in _wait_gone(procs, grace_s):
        _signal(proc, signal.SIGKILL)
    if procs:
        log.info("stopped %d process(es) of %s", len(procs), folder)
    return [p.pid for p in procs]


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """The processes still alive after ``timeout_s``; a zombie counts as gone.

    Polled rather than ``psutil.wait_procs``, which reaps this process's own children (the sandbox's Popen)
    and would leave their Popen without a return code.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for proc in procs:
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)
