"""Run a command that must not outlive the process that started it, even when that process is killed with -9.

``VLLMServer`` starts the engine through this wrapper: ``python watchdog.py PARENT_PID FD -- CMD...``. The
wrapper leads the engine's process group (the starter gives it a session of its own), runs CMD in that same
group, and watches its starter two ways: the read end ``FD`` of a pipe whose write end only the starter holds
(EOF the moment the starter's process is gone, however it died) and ``getppid()``, checked every
``POLL_S`` (the pipe alone is not enough when the starter forked without exec, since a forked copy keeps the
write end open). When the starter is gone it stops the whole group, CMD and the engine-core processes vLLM
spawned into it: SIGTERM, then SIGKILL after ``GRACE_S``.

Why not ``prctl(PR_SET_PDEATHSIG)``: it fires when the parent *thread* exits, so an engine started from a
worker thread would die with that thread while the trainer lives; and it reaches only the direct child, not
the engine-core processes vLLM starts. ``getppid()`` changes only when the whole parent process is gone.

Otherwise the wrapper stays out of the way: it exits with CMD's status (a signal N as 128+N) when CMD exits
by itself, and on SIGTERM (``VLLMServer.stop`` signals the whole group) it waits for CMD like CMD's own
shutdown would. It is run as a file with ``-I``, so it imports only the standard library.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

#: Seconds between two checks of the parent (the pipe wakes the wrapper at once in the usual case).
POLL_S = 0.5
#: Seconds between SIGTERM and SIGKILL of the group once the parent is gone.
GRACE_S = 5.0


def parent_gone(parent_pid: int, fd: int) -> bool:
    """Whether the starter is gone: its pipe reached EOF or this process was re-parented."""
    if os.getppid() != parent_pid:
        return True
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable) and os.read(fd, 1) == b""


def stop_group(child: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM this process group (the wrapper survives it), wait for ``child`` up to ``grace_s``, then SIGKILL the
    whole group, the wrapper included (whatever is left of the engine must not hold the GPU or the port)."""
    signal.signal(signal.SIGTERM, lambda *_: None)
    os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(0, signal.SIGKILL)


def main(argv: list[str]) -> int:
    parent_pid, fd, sep, *cmd = argv
    if sep != "--" or not cmd:
        raise SystemExit("usage: watchdog.py PARENT_PID FD -- CMD...")
    parent, read_fd = int(parent_pid), int(fd)
    # A handler, not SIG_IGN: an ignored signal stays ignored across exec, and CMD must see SIGTERM normally.
    signal.signal(signal.SIGTERM, lambda *_: None)
    child = subprocess.Popen(cmd, close_fds=True)  # same process group: stop() and stop_group reach it
    while True:
        try:
            code = child.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            if parent_gone(parent, read_fd):
                stop_group(child, GRACE_S)
            continue
        return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
