"""The issue's bad cases for each of the six real harnesses, through the real rollout path where it applies:

- the engine hangs: the harness is killed at the wall-clock limit, the rollout is unscorable (the engine's fault),
  nothing survives;
- the harness exits 0 without doing anything: the outcome says "no_output" and the rollout is unscorable;
- the endpoint is down: the run ends (on its own or killed) by the limit plus a grace, leaving no process.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Sequence

import pytest

from harness_rl.envs.smoke import smoke_task
from harness_rl.harnesses import HARNESSES
from harness_rl.rollout.proxy_admin import ProxyAdmin
from harness_rl.rollout.session import RolloutSettings, run_rollout
from harness_rl.sandbox.base import SandboxLayout
from harness_rl.sandbox.local import LocalSandbox
from harness_rl.testkit.scripted_proxy import ScriptedProxy
from tests.processes import DescendantWatcher

pytestmark = [pytest.mark.slow, pytest.mark.harness]

SIX = ["pi", "opencode", "hermes", "claude_code", "codex", "mini_swe_agent"]
LIMIT_S = 10
#: SIGTERM grace, SIGKILL wait and process start-up: what a run may take past its limit.
GRACE_S = 15
#: Node (pi) and Bun (opencode, claude) reserve more address space than the default cap allows.
ADDRESS_SPACE = 32 << 30


def settings(timeout_s: float) -> RolloutSettings:
    return RolloutSettings(step_limit=5, max_requests=10, timeout_s=timeout_s, verifier_timeout_s=30,
                           temperature=1.0, max_tokens=64)  # fmt: skip


class SilentSandbox(LocalSandbox):
    """Runs ``true`` in place of the harness: a harness that exits 0 at once without doing anything."""

    def command(self, argv: Sequence[str], layout: SandboxLayout) -> list[str]:
        return super().command(["true"], layout)


@pytest.fixture(scope="module")
def proxy() -> Iterator[tuple[ScriptedProxy, ProxyAdmin]]:
    for name in SIX:
        HARNESSES[name]().install()  # idempotent
    with ScriptedProxy() as scripted:
        admin = ProxyAdmin(scripted.url, scripted.admin_token)
        yield scripted, admin
        admin.close()


@pytest.mark.parametrize("name", SIX)
def test_hanging_engine_is_killed_at_the_limit_and_unscorable(name, proxy, tmp_path):
    scripted, admin = proxy
    scripted.script([], hang=True)
    harness = HARNESSES[name](sandbox=LocalSandbox(address_space_bytes=ADDRESS_SPACE))
    with DescendantWatcher() as watcher:
        start = time.monotonic()
        result = run_rollout(task=smoke_task("t", "out.txt", "apple"), harness=harness, proxy=admin, adapter=None,
                             settings=settings(LIMIT_S), rollout_dir=tmp_path / "r")  # fmt: skip
        elapsed = time.monotonic() - start
    assert result.outcome is not None and result.outcome.timed_out, result.outcome
    assert result.outcome.exit_kind == "timeout" and result.score is None
    # The clock ran out on the engine, not on the agent: an infrastructure fault, so unscorable (a timeout while the
    # agent itself was working is scored; tests/unit/test_rollout_scoring.py).
    assert result.unscorable == f"harness killed at the {LIMIT_S} s wall-clock limit while waiting for the engine"
    assert len(scripted.engine.requests) == 0 and result.trace["requests"] >= 1  # it did ask, and waited
    assert LIMIT_S <= elapsed < LIMIT_S + GRACE_S
    assert watcher.pids and watcher.alive() == []


@pytest.mark.parametrize("name", SIX)
def test_exit_zero_without_doing_anything_is_reported_and_unscorable(name, proxy, tmp_path):
    scripted, admin = proxy
    scripted.script([])
    harness = HARNESSES[name](sandbox=SilentSandbox(address_space_bytes=None))
    result = run_rollout(task=smoke_task("t", "out.txt", "apple"), harness=harness, proxy=admin, adapter=None,
                         settings=settings(60), rollout_dir=tmp_path / "r")  # fmt: skip
    assert result.outcome is not None and result.outcome.returncode == 0
    assert result.outcome.exit_kind == "no_output", result.outcome
    assert result.outcome.n_turns == 0 and result.score is None
    assert result.unscorable == "no training sequence captured (the harness made no engine call)"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("name", SIX)
def test_endpoint_down_is_bounded_by_the_limit(name, tmp_path):
    harness = HARNESSES[name](sandbox=LocalSandbox(address_space_bytes=ADDRESS_SPACE))
    harness.install()
    down = closed_port()
    with DescendantWatcher() as watcher:
        start = time.monotonic()
        outcome = harness.run(tmp_path / "ws", "Create out.txt.", base_url=f"http://127.0.0.1:{down}/v1",
                              api_key="k", step_limit=5, timeout_s=LIMIT_S, rollout_dir=tmp_path / "r")  # fmt: skip
        elapsed = time.monotonic() - start
    print(f"{name}: {outcome.exit_kind} after {elapsed:.1f} s: {(outcome.error or '')[:200]!r}")
    assert elapsed < LIMIT_S + GRACE_S
    assert outcome.exit_kind in ("error", "timeout"), outcome
    assert outcome.timed_out == (outcome.exit_kind == "timeout")
    assert not (tmp_path / "ws" / "out.txt").exists()
    assert watcher.pids and watcher.alive() == []
