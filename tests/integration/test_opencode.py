"""The real opencode 1.18.33 (with its plugin SDK preinstalled in a template HOME, so it makes no registry call)
runs one shell command through the real capture proxy (streamed OpenAI chat, scripted engine) and finishes;
its soft step limit is enforced by the proxy's request budget; a hanging endpoint is killed at the wall-clock
limit and a missing binary names the install command."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from harness_rl.harnesses import HARNESSES, HarnessNotInstalledError
from harness_rl.harnesses.install import NPM_TOOLS, STAMP_NAME, npm_prefix
from harness_rl.harnesses.opencode import OpenCode
from harness_rl.testkit.fake_vllm import Reply
from harness_rl.testkit.scripted_proxy import ScriptedProxy, shell_then_done
from tests.processes import DescendantWatcher

pytestmark = [pytest.mark.slow, pytest.mark.harness]


@pytest.fixture(scope="module")
def opencode() -> OpenCode:
    harness = HARNESSES["opencode"]()
    harness.install()
    stamps = [npm_prefix() / ".stamps" / "opencode.json", harness.config_template / STAMP_NAME]
    mtimes = [s.stat().st_mtime_ns for s in stamps]
    harness.install()  # idempotent: both stamps match, npm does not run again
    assert [s.stat().st_mtime_ns for s in stamps] == mtimes
    assert harness.is_installed() and harness.version() == NPM_TOOLS["opencode"].version == "1.18.33"
    return harness


@pytest.fixture(scope="module")
def proxy() -> Iterator[ScriptedProxy]:
    with ScriptedProxy() as stack:
        yield stack


def _run(opencode: OpenCode, proxy: ScriptedProxy, tmp_path, key: str, **kw):
    args = {"base_url": proxy.base_url, "api_key": key, "step_limit": 5, "timeout_s": 90, **kw}
    return opencode.run(tmp_path / "ws", "Create out.txt containing hello.", rollout_dir=tmp_path / "r", **args)


def test_runs_one_command_through_the_proxy_and_submits(opencode, proxy, tmp_path):
    key = proxy.session(shell_then_done(*opencode.shell_tool))
    with DescendantWatcher() as watcher:
        outcome = _run(opencode, proxy, tmp_path, key)
    assert (tmp_path / "ws" / "out.txt").read_text() == "hello\n"
    assert outcome.exit_kind == "submitted", outcome
    assert (outcome.returncode, outcome.n_turns, outcome.n_tool_calls) == (0, 2, 1)
    assert outcome.final_message == "Done: out.txt written." and outcome.exit_status == "stop"
    # Exactly the two agent calls (no title-generation call), streamed OpenAI chat, our output cap.
    assert [r["stream"] for r in proxy.engine.requests] == [True, True]
    assert all(r["max_tokens"] == opencode.max_output_tokens for r in proxy.engine.requests)
    tools = [t["function"]["name"] for t in proxy.engine.requests[0]["tools"]]
    assert "bash" in tools and "webfetch" not in tools  # denied: it would reach the internet
    trace = proxy.trace(key)
    assert [n["dialect"] for n in trace["nodes"]] == ["openai_chat"] * 2 and trace["sequences"]
    # The rollout HOME got the plugin SDK from the template (so opencode did not npm-install it).
    config_dir = tmp_path / "r" / "home" / ".config" / "opencode"
    assert (config_dir / "node_modules").resolve() == (opencode.config_template / "node_modules").resolve()
    config = json.loads((tmp_path / "r" / "harness" / "opencode.json").read_text())
    assert config["provider"]["harness-rl"]["options"]["baseURL"] == proxy.base_url
    assert config["agent"]["build"]["steps"] == 5
    assert watcher.alive() == []


def test_soft_step_limit_is_enforced_by_the_proxy_budget(opencode, proxy, tmp_path):
    assert not opencode.step_limit_is_hard
    key = proxy.session([Reply(tool_calls=[("bash", {"command": f"echo {i} >> log.txt"})]) for i in range(8)],
                        max_requests=3)  # fmt: skip
    outcome = _run(opencode, proxy, tmp_path, key, step_limit=3)
    assert len(proxy.engine.requests) == 3
    assert outcome.exit_kind == "limits_exceeded", outcome
    assert (tmp_path / "ws" / "log.txt").read_text().split() == ["0", "1", "2"]


def test_hanging_endpoint_is_killed_at_the_wall_clock_limit(opencode, proxy, tmp_path):
    key = proxy.session(shell_then_done(*opencode.shell_tool), chunk_delay_s=30)
    with DescendantWatcher() as watcher:
        start = time.monotonic()
        outcome = _run(opencode, proxy, tmp_path, key, timeout_s=10)
        elapsed = time.monotonic() - start
    assert outcome.exit_kind == "timeout" and outcome.timed_out
    assert elapsed < 10 + 15
    assert watcher.pids and watcher.alive() == []


def test_missing_binary_names_the_install_command(tmp_path):
    harness = OpenCode(tools=tmp_path / "no-tools")
    assert not harness.is_installed()
    with pytest.raises(HarnessNotInstalledError, match="python -m harness_rl.harnesses install opencode"):
        harness.run(tmp_path / "ws", "x", base_url="http://127.0.0.1:9/v1", api_key="k", step_limit=1,
                    timeout_s=5, rollout_dir=tmp_path / "r")  # fmt: skip
