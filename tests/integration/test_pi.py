"""The real pi 0.73.1, installed idempotently into the shared npm prefix, runs one shell command through the
real capture proxy (streamed OpenAI chat, scripted engine) and finishes; its step-limit extension stops it hard;
a dead endpoint, a hanging one and a missing binary end the way the adapter promises, leaving no process."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from harness_rl.harnesses import HARNESSES, HarnessNotInstalledError
from harness_rl.harnesses.install import NPM_TOOLS, npm_prefix
from harness_rl.harnesses.pi import Pi
from harness_rl.testkit.fake_vllm import Reply
from harness_rl.testkit.scripted_proxy import ScriptedProxy, shell_then_done
from tests.processes import DescendantWatcher

pytestmark = [pytest.mark.slow, pytest.mark.harness]


@pytest.fixture(scope="module")
def pi() -> Pi:
    harness = HARNESSES["pi"]()
    harness.install()
    stamp = npm_prefix() / ".stamps" / "pi.json"
    mtime = stamp.stat().st_mtime_ns
    harness.install()  # idempotent: the stamp matches, npm does not run again
    assert stamp.stat().st_mtime_ns == mtime
    assert harness.is_installed() and harness.version() == NPM_TOOLS["pi"].version == "0.73.1"
    return harness


@pytest.fixture(scope="module")
def proxy() -> Iterator[ScriptedProxy]:
    with ScriptedProxy() as stack:
        yield stack


def _run(pi: Pi, proxy: ScriptedProxy, tmp_path, key: str, **kw):
    args = {"base_url": proxy.base_url, "api_key": key, "step_limit": 5, "timeout_s": 60, **kw}
    return pi.run(tmp_path / "ws", "Create out.txt containing hello.", rollout_dir=tmp_path / "r", **args)


def test_runs_one_command_through_the_proxy_and_submits(pi, proxy, tmp_path):
    key = proxy.session(shell_then_done(*pi.shell_tool))
    with DescendantWatcher() as watcher:
        outcome = _run(pi, proxy, tmp_path, key)
    assert (tmp_path / "ws" / "out.txt").read_text() == "hello\n"
    assert outcome.exit_kind == "submitted", outcome
    assert (outcome.returncode, outcome.n_turns, outcome.n_tool_calls) == (0, 2, 1)
    assert outcome.final_message == "Done: out.txt written." and outcome.exit_status == "stop"
    # The proxy saw both calls as streamed OpenAI chat with our output cap, under this rollout's key.
    assert [r["stream"] for r in proxy.engine.requests] == [True, True]
    assert all(r["max_tokens"] == pi.max_output_tokens for r in proxy.engine.requests)
    assert [t["function"]["name"] for t in proxy.engine.requests[0]["tools"]] == ["read", "bash", "edit", "write"]
    nodes = proxy.trace(key)["nodes"]
    assert [n["dialect"] for n in nodes] == ["openai_chat"] * 2
    assert nodes[0]["tool_calls"][0]["function"]["name"] == "bash"
    assert proxy.trace(key)["sequences"]
    # The per-rollout config came from the templates; the real HOME was not touched (HOME is the rollout's).
    models = (tmp_path / "r" / "harness" / "pi-agent" / "models.json").read_text()
    assert proxy.base_url in models and key not in models
    assert watcher.alive() == []


def test_step_limit_extension_stops_pi_hard(pi, proxy, tmp_path):
    key = proxy.session([Reply(tool_calls=[("bash", {"command": f"echo {i} >> log.txt"})]) for i in range(8)])
    outcome = _run(pi, proxy, tmp_path, key, step_limit=3)
    assert pi.step_limit_is_hard
    assert len(proxy.engine.requests) == 3
    assert outcome.exit_kind == "limits_exceeded", outcome
    assert outcome.n_tool_calls == 3 and (tmp_path / "ws" / "log.txt").read_text().split() == ["0", "1", "2"]


def test_proxy_budget_reply_counts_as_limits_exceeded(pi, proxy, tmp_path):
    key = proxy.session([Reply(tool_calls=[("bash", {"command": "true"})])] * 5, max_requests=2)
    outcome = _run(pi, proxy, tmp_path, key, step_limit=10)
    assert len(proxy.engine.requests) == 2 and outcome.exit_kind == "limits_exceeded", outcome


def test_dead_endpoint_is_an_error_and_leaves_nothing(pi, tmp_path):
    with DescendantWatcher() as watcher:
        outcome = pi.run(tmp_path / "ws", "x", base_url="http://127.0.0.1:9/v1", api_key="k", step_limit=3,
                         timeout_s=60, rollout_dir=tmp_path / "r")  # fmt: skip
    assert outcome.exit_kind == "error" and not outcome.timed_out
    assert "Connection error" in outcome.error
    assert watcher.alive() == []


def test_hanging_endpoint_is_killed_at_the_wall_clock_limit(pi, proxy, tmp_path):
    key = proxy.session(shell_then_done(*pi.shell_tool), chunk_delay_s=30)
    with DescendantWatcher() as watcher:
        start = time.monotonic()
        outcome = _run(pi, proxy, tmp_path, key, timeout_s=6)
        elapsed = time.monotonic() - start
    assert outcome.exit_kind == "timeout" and outcome.timed_out
    assert elapsed < 6 + 15
    assert watcher.pids and watcher.alive() == []


def test_missing_binary_names_the_install_command(tmp_path):
    harness = Pi(tools=tmp_path / "no-tools")
    assert not harness.is_installed()
    with pytest.raises(HarnessNotInstalledError, match="python -m harness_rl.harnesses install pi"):
        harness.run(tmp_path / "ws", "x", base_url="http://127.0.0.1:9/v1", api_key="k", step_limit=1,
                    timeout_s=5, rollout_dir=tmp_path / "r")  # fmt: skip
