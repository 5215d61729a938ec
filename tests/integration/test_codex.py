"""The real codex 0.171.0 binary, installed idempotently, runs one shell command through its own exec_command
tool against the real proxy (OpenAI Responses, streamed) and a scripted engine, and its outcome is parsed from
its `exec --json` events; the proxy's request budget is its step limit, and a dead endpoint (which codex
retries forever) and a missing binary end the run cleanly."""

from __future__ import annotations

import time
import tomllib
from collections.abc import Iterator

import pytest

from harness_rl.harnesses import HARNESSES, Harness, HarnessNotInstalledError
from harness_rl.harnesses.codex import Codex
from harness_rl.harnesses.install import NPM_TOOLS, npm_prefix
from harness_rl.testkit.fake_vllm import Reply
from harness_rl.testkit.scripted_proxy import ScriptedProxy, shell_then_done
from tests.processes import DescendantWatcher

pytestmark = [pytest.mark.slow, pytest.mark.harness]


@pytest.fixture(scope="module")
def codex() -> Iterator[Codex]:
    harness = Codex()
    harness.install()
    stamp = npm_prefix() / ".stamps" / "codex.json"
    mtime = stamp.stat().st_mtime_ns
    harness.install()  # idempotent: the stamp is there, npm does not run again
    assert stamp.stat().st_mtime_ns == mtime
    assert harness.is_installed() and harness.version() == NPM_TOOLS["codex"].version == "0.171.0"
    yield harness


@pytest.fixture(scope="module")
def proxy() -> Iterator[ScriptedProxy]:
    with ScriptedProxy() as p:
        yield p


def test_codex_is_a_registered_harness():
    assert HARNESSES["codex"] is Codex and isinstance(Codex(), Harness)
    assert Codex.dialect == "openai_responses" and not Codex.step_limit_is_hard


def test_exec_command_runs_the_command_through_the_proxy(codex, proxy, tmp_path):
    key = proxy.session(shell_then_done(*Codex.shell_tool))
    with DescendantWatcher() as watcher:
        outcome = codex.run(tmp_path / "ws", "Create out.txt containing hello.", base_url=proxy.base_url,
                            api_key=key, step_limit=5, timeout_s=120, rollout_dir=tmp_path / "r")  # fmt: skip
    assert (tmp_path / "ws" / "out.txt").read_text() == "hello\n"
    assert outcome.exit_kind == "submitted" and outcome.returncode == 0 and not outcome.timed_out, outcome
    assert outcome.n_turns == 2 and outcome.n_tool_calls == 1
    assert outcome.final_message == "Done: out.txt written."
    trace = proxy.trace(key)
    assert trace["requests"] == 2 and trace["failures"] == []
    assert [n["dialect"] for n in trace["nodes"]] == ["openai_responses"] * 2
    assert trace["nodes"][0]["tool_calls"][0]["function"]["name"] == "exec_command"
    assert trace["sequences"] and any(trace["sequences"][0]["loss_mask"])
    assert [r["stream"] for r in proxy.engine.requests] == [True, True]
    # The lean config: no hosted web_search and no multi-agent "namespace" tool reach the engine.
    assert {t["function"]["name"] for t in proxy.engine.requests[0]["tools"]} >= {"exec_command"}
    assert all(t["type"] == "function" for t in proxy.engine.requests[0]["tools"])
    config = tomllib.loads((tmp_path / "r" / "harness" / "codex" / "config.toml").read_text())
    assert config["model_providers"]["capture"]["base_url"] == proxy.base_url
    assert key not in (tmp_path / "r" / "harness" / "codex" / "config.toml").read_text()
    assert watcher.alive() == []


def test_the_proxy_budget_is_the_step_limit(codex, proxy, tmp_path):
    loop = [Reply(tool_calls=[("exec_command", {"cmd": f"echo {i} >> log.txt"})]) for i in range(10)]
    key = proxy.session(loop, max_requests=3)
    outcome = codex.run(tmp_path / "ws", "Keep logging.", base_url=proxy.base_url, api_key=key, step_limit=3,
                        timeout_s=120, rollout_dir=tmp_path / "r")  # fmt: skip
    # Past the budget the proxy answers with plain text itself, and codex ends its turn normally.
    assert len(proxy.engine.requests) == 3
    assert outcome.exit_kind == "submitted", outcome
    assert (tmp_path / "ws" / "log.txt").read_text().split() == ["0", "1", "2"]


def test_dead_endpoint_is_killed_at_the_limit(codex, tmp_path):
    # codex retries a refused connection forever ("Reconnecting..."): only the wall-clock limit ends it.
    with DescendantWatcher() as watcher:
        start = time.monotonic()
        outcome = codex.run(tmp_path / "ws", "Do it.", base_url="http://127.0.0.1:9/v1", api_key="k" * 8,
                            step_limit=5, timeout_s=10, rollout_dir=tmp_path / "r")  # fmt: skip
        elapsed = time.monotonic() - start
    assert outcome.exit_kind == "timeout" and outcome.timed_out, outcome
    assert 10 <= elapsed < 10 + 10
    assert watcher.pids and watcher.alive() == []


def test_missing_binary_names_the_install_command(tmp_path):
    harness = Codex(tools=tmp_path / "no-tools")
    assert not harness.is_installed()
    with pytest.raises(HarnessNotInstalledError, match="python -m harness_rl.harnesses install codex"):
        harness.run(tmp_path / "ws", "x", base_url="http://127.0.0.1:9/v1", api_key="k", step_limit=1,
                    timeout_s=5, rollout_dir=tmp_path / "r")  # fmt: skip
