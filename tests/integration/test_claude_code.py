"""The real claude-code 2.1.332 binary, installed idempotently, runs one shell command through its own Bash
tool against the real proxy (Anthropic Messages, streamed) and a scripted engine, and its outcome is parsed
from its own output; its turn limit, a dead or hanging endpoint and a missing binary end the run cleanly."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from harness_rl.harnesses import HARNESSES, Harness, HarnessNotInstalledError
from harness_rl.harnesses.claude_code import ClaudeCode
from harness_rl.harnesses.install import NPM_TOOLS, npm_prefix
from harness_rl.testkit.fake_vllm import Reply
from harness_rl.testkit.scripted_proxy import ScriptedProxy, shell_then_done
from tests.processes import DescendantWatcher

pytestmark = [pytest.mark.slow, pytest.mark.harness]


@pytest.fixture(scope="module")
def claude() -> Iterator[ClaudeCode]:
    harness = ClaudeCode()
    harness.install()
    stamp = npm_prefix() / ".stamps" / "claude_code.json"
    mtime = stamp.stat().st_mtime_ns
    harness.install()  # idempotent: the stamp is there, npm does not run again
    assert stamp.stat().st_mtime_ns == mtime
    assert harness.is_installed() and harness.version() == NPM_TOOLS["claude_code"].version == "2.1.332"
    yield harness


@pytest.fixture(scope="module")
def proxy() -> Iterator[ScriptedProxy]:
    with ScriptedProxy() as p:
        yield p


def test_claude_is_a_registered_harness():
    assert HARNESSES["claude_code"] is ClaudeCode and isinstance(ClaudeCode(), Harness)
    assert ClaudeCode.dialect == "anthropic_messages" and ClaudeCode.step_limit_is_hard


def test_bash_tool_runs_the_command_through_the_proxy(claude, proxy, tmp_path):
    key = proxy.session(shell_then_done(*ClaudeCode.shell_tool))
    with DescendantWatcher() as watcher:
        outcome = claude.run(tmp_path / "ws", "Create out.txt containing hello.", base_url=proxy.base_url,
                             api_key=key, step_limit=5, timeout_s=120, rollout_dir=tmp_path / "r")  # fmt: skip
    assert (tmp_path / "ws" / "out.txt").read_text() == "hello\n"
    assert outcome.exit_kind == "submitted" and outcome.returncode == 0 and not outcome.timed_out, outcome
    assert outcome.n_turns == 2 and outcome.n_tool_calls == 1
    assert outcome.final_message == "Done: out.txt written."
    trace = proxy.trace(key)
    assert trace["requests"] == 2 and trace["failures"] == []
    assert [n["dialect"] for n in trace["nodes"]] == ["anthropic_messages"] * 2
    assert trace["nodes"][0]["tool_calls"][0]["function"]["name"] == "Bash"
    assert trace["sequences"] and any(trace["sequences"][0]["loss_mask"])
    assert [r["stream"] for r in proxy.engine.requests] == [True, True]  # claude streams; the proxy relays it
    assert all(r["max_tokens"] == claude.max_output_tokens for r in proxy.engine.requests)
    assert watcher.alive() == []


def test_max_turns_is_a_hard_stop(claude, proxy, tmp_path):
    loop = [Reply(tool_calls=[("Bash", {"command": f"echo {i} >> log.txt"})]) for i in range(10)]
    key = proxy.session(loop)
    outcome = claude.run(tmp_path / "ws", "Keep logging.", base_url=proxy.base_url, api_key=key, step_limit=3,
                         timeout_s=120, rollout_dir=tmp_path / "r")  # fmt: skip
    assert outcome.exit_kind == "limits_exceeded" and outcome.exit_status == "max_turns", outcome
    assert outcome.n_turns == 3 and len(proxy.engine.requests) == 3
    assert (tmp_path / "ws" / "log.txt").read_text().split() == ["0", "1", "2"]


def test_dead_endpoint_is_an_error_within_the_limit(claude, tmp_path):
    with DescendantWatcher() as watcher:
        start = time.monotonic()
        outcome = claude.run(tmp_path / "ws", "Do it.", base_url="http://127.0.0.1:9/v1", api_key="k" * 8,
                             step_limit=5, timeout_s=60, rollout_dir=tmp_path / "r")  # fmt: skip
        elapsed = time.monotonic() - start
    assert outcome.exit_kind == "error" and outcome.returncode == 1, outcome
    assert "Connection" in outcome.error or "ECONNREFUSED" in outcome.error
    assert elapsed < 60  # CLAUDE_CODE_MAX_RETRIES=1: it gives up on its own instead of retrying for minutes
    assert watcher.alive() == []


def test_hanging_endpoint_is_killed_at_the_limit(claude, proxy, tmp_path):
    key = proxy.session(shell_then_done(*ClaudeCode.shell_tool), chunk_delay_s=60)
    with DescendantWatcher() as watcher:
        start = time.monotonic()
        outcome = claude.run(tmp_path / "ws", "Do it.", base_url=proxy.base_url, api_key=key, step_limit=5,
                             timeout_s=8, rollout_dir=tmp_path / "r")  # fmt: skip
        elapsed = time.monotonic() - start
    assert outcome.exit_kind == "timeout" and outcome.timed_out
    assert 8 <= elapsed < 8 + 10
    assert watcher.pids and watcher.alive() == []


def test_missing_binary_names_the_install_command(tmp_path):
    harness = ClaudeCode(tools=tmp_path / "no-tools")
    assert not harness.is_installed()
    with pytest.raises(HarnessNotInstalledError, match="python -m harness_rl.harnesses install claude_code"):
        harness.run(tmp_path / "ws", "x", base_url="http://127.0.0.1:9/v1", api_key="k", step_limit=1,
                    timeout_s=5, rollout_dir=tmp_path / "r")  # fmt: skip
