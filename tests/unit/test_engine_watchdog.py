"""The engine never outlives the process that started it: after a ``kill -9`` of that process, every process of
the engine's group (the server and the engine-core worker it forked, which ignores SIGTERM and holds the
listening socket) is gone within 15 s and the port is free again. The stub engine is an HTTP server answering
/health, like the one tests/unit/test_engine_server.py uses; no vLLM runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from harness_rl.config.schema import PROJECT_ROOT

# The stand-in engine: binds its port, forks an "engine core" that ignores SIGTERM and keeps the listening
# socket open (so the port is free only once both are gone), then serves /health.
STUB_ENGINE = textwrap.dedent("""\
    import http.server, os, signal, sys, time
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a):
            pass
    server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)
        os._exit(0)
    server.serve_forever()
""")

# The "trainer": starts the stub through VLLMServer, reports the engine's PID and port, then waits to be killed.
TRAINER = textwrap.dedent("""\
    import json, sys, time
    from harness_rl.engine.server import VLLMServer
    server = VLLMServer("/models/m", served_model_name="base", max_lora_rank=8, max_loras=1,
                        log_path=sys.argv[2], startup_timeout_s=60, stop_grace_s=1)
    server.command = lambda: [sys.executable, "-c", sys.argv[1], str(server.port)]
    server.start()
    print(json.dumps({"pid": server.pid, "port": server.port}), flush=True)
    time.sleep(600)
""")


def group_members(pgid: int) -> list[int]:
    """PIDs of the live (non-zombie) processes of process group ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def port_free(port: int) -> bool:
    """Whether a restarted server could listen on ``port`` (with SO_REUSEADDR, as uvicorn binds: connections the
    old server closed may linger in TIME_WAIT, which never blocks a listener)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_kill_9_of_the_starter_takes_the_whole_engine_group_down(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, STUB_ENGINE, str(tmp_path / "engine.log")],
        stdout=subprocess.PIPE,
        env=env,
        cwd=PROJECT_ROOT,
        text=True,
    )
    pgid = None
    try:
        line = trainer.stdout.readline()
        assert line, f"the trainer stand-in did not start the engine: {(tmp_path / 'engine.log').read_text()}"
        started = json.loads(line)
        pgid, port = started["pid"], started["port"]
        before = group_members(pgid)
        assert len(before) >= 3, before  # the watchdog, the stub server and its "engine core"
        assert not port_free(port)

        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait(timeout=10)
        deadline = time.monotonic() + 15
        while (group_members(pgid) or not port_free(port)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert group_members(pgid) == [], f"still alive 15 s after kill -9 of the trainer: {group_members(pgid)}"
        assert port_free(port)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
        if pgid is not None and group_members(pgid):  # a failing run must not leave the stub behind
            os.killpg(pgid, signal.SIGKILL)
