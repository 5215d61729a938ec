"""All six harnesses, configured by their adapters, open no connection other than loopback during a scripted
rollout: every connect() of every process they start (seen by strace inside the sandbox) goes to 127.0.0.1, ::1
or a Unix socket. strace is a system dependency (``make system-deps``); without it this test fails, it does not
skip."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from harness_rl.harnesses import HARNESSES
from harness_rl.harnesses.check import scripted_replies
from harness_rl.sandbox.base import SandboxLayout
from harness_rl.sandbox.local import LocalSandbox
from harness_rl.testkit.scripted_proxy import ScriptedProxy

pytestmark = [pytest.mark.slow, pytest.mark.harness]

TRACE_NAME = "connect.strace"
_INET = re.compile(r"connect\(\d+, \{sa_family=AF_INET6?, (?:sin_port|sin6_port)=htons\((\d+)\), (.*?)\}")


class StracedSandbox(LocalSandbox):
    """A LocalSandbox that runs the harness under ``strace -f -e trace=connect`` inside the sandbox."""

    def command(self, argv: Sequence[str], layout: SandboxLayout) -> list[str]:
        trace = layout.writable[0] / TRACE_NAME
        return super().command(["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace), *argv], layout)


def inet_destinations(trace: Path) -> list[str]:
    """``address:port`` of every AF_INET/AF_INET6 connect() in an strace log."""
    out = []
    for line in trace.read_text(errors="replace").splitlines():
        m = _INET.search(line)
        if m:
            address = re.search(r'inet_(?:addr|pton)\((?:AF_INET6, )?"([^"]+)"', m.group(2))
            out.append(f"{address.group(1) if address else m.group(2)}:{m.group(1)}")
    return out


@pytest.fixture(scope="module")
def proxy() -> Iterator[ScriptedProxy]:
    if shutil.which("strace") is None:
        pytest.fail("strace is not installed: run `make system-deps` (or `apt-get install -y strace`)")
    with ScriptedProxy() as p:
        yield p


@pytest.mark.parametrize("name", ["pi", "opencode", "hermes", "claude_code", "codex", "mini_swe_agent"])
def test_only_loopback_connections(name, proxy, tmp_path):
    harness = HARNESSES[name](sandbox=StracedSandbox(address_space_bytes=None))  # ptrace + RLIMIT_AS: keep it simple
    harness.install()
    key = proxy.session(scripted_replies(harness, "echo hello > out.txt"))
    outcome = harness.run(tmp_path / "ws", "Create out.txt containing hello.", base_url=proxy.base_url,
                          api_key=key, step_limit=5, timeout_s=120, rollout_dir=tmp_path / "r")  # fmt: skip
    assert outcome.exit_kind == "submitted", outcome
    assert (tmp_path / "ws" / "out.txt").read_text() == "hello\n"
    destinations = inet_destinations(tmp_path / "r" / "harness" / TRACE_NAME)
    proxy_port = proxy.base_url.rsplit(":", 1)[1].split("/")[0]
    assert f"127.0.0.1:{proxy_port}" in destinations  # the trace does see the harness's calls
    assert [d for d in destinations if not d.startswith(("127.", "::1:", "::ffff:127."))] == []
