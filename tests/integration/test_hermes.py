"""The real hermes-agent 0.19.0, installed idempotently in its own venv, runs one shell command through its
own terminal tool against the real proxy (OpenAI chat, streamed) and a scripted engine, and its outcome is
parsed from its own records (state.db, agent.log); its turn limit, a dead endpoint and a missing binary end
the run cleanly, and it makes no call outside the proxy."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml

from harness_rl.harnesses import HARNESSES, Harness, HarnessNotInstalledError
from harness_rl.harnesses.hermes import MIN_CONTEXT_LENGTH, Hermes
from harness_rl.harnesses.install import STAMP_NAME, venv_dir
from harness_rl.testkit.fake_vllm import Reply
from harness_rl.testkit.scripted_proxy import ScriptedProxy, shell_then_done
from tests.processes import DescendantWatcher

pytestmark = [pytest.mark.slow, pytest.mark.harness]


@pytest.fixture(scope="module")
def hermes() -> Iterator[Hermes]:
    harness = Hermes()
    harness.install()
    stamp = venv_dir(harness._spec) / STAMP_NAME
    mtime = stamp.stat().st_mtime_ns
    harness.install()  # idempotent: the stamp is there, pip does not run again
    assert stamp.stat().st_mtime_ns == mtime
    assert harness.is_installed() and harness.version() == "0.19.0"
    yield harness


@pytest.fixture(scope="module")
def proxy() -> Iterator[ScriptedProxy]:
    with ScriptedProxy() as p:
        yield p


def test_hermes_is_a_registered_harness():
    assert HARNESSES["hermes"] is Hermes and isinstance(Hermes(), Harness)
    assert Hermes.dialect == "openai_chat" and Hermes.step_limit_is_hard


def test_terminal_tool_runs_the_command_through_the_proxy(hermes, proxy, tmp_path):
    key = proxy.session(shell_then_done(*Hermes.shell_tool))
    with DescendantWatcher() as watcher:
        outcome = hermes.run(tmp_path / "ws", "Create out.txt containing hello.", base_url=proxy.base_url,
                             api_key=key, step_limit=5, timeout_s=120, rollout_dir=tmp_path / "r")  # fmt: skip
    assert (tmp_path / "ws" / "out.txt").read_text() == "hello\n"
    assert outcome.exit_kind == "submitted" and outcome.returncode == 0 and not outcome.timed_out, outcome
    assert outcome.n_turns == 2 and outcome.n_tool_calls == 1
    assert outcome.final_message == "Done: out.txt written."
    trace = proxy.trace(key)
    assert trace["requests"] == 2 and trace["failures"] == []
    assert [n["dialect"] for n in trace["nodes"]] == ["openai_chat"] * 2
    assert trace["nodes"][0]["tool_calls"][0]["function"]["name"] == "terminal"
    assert trace["sequences"] and any(trace["sequences"][0]["loss_mask"])
    assert [r["stream"] for r in proxy.engine.requests] == [True, True]
    assert all(r["max_tokens"] == hermes.max_output_tokens for r in proxy.engine.requests)
    home = tmp_path / "r" / "harness" / "hermes"
    config = yaml.safe_load((home / "config.yaml").read_text())
    assert config["model"]["base_url"] == proxy.base_url
    assert config["model"]["context_length"] == MIN_CONTEXT_LENGTH
    assert key not in (home / "config.yaml").read_text()
    assert watcher.alive() == []


def test_max_turns_is_a_hard_stop(hermes, proxy, tmp_path):
    loop = [Reply(tool_calls=[("terminal", {"command": f"echo {i} >> log.txt"})]) for i in range(3)]
    key = proxy.session([*loop, Reply(text="Summary: logged.")])
    outcome = hermes.run(tmp_path / "ws", "Keep logging.", base_url=proxy.base_url, api_key=key, step_limit=4,
                         timeout_s=120, rollout_dir=tmp_path / "r")  # fmt: skip
    assert outcome.exit_kind == "limits_exceeded", outcome
    assert outcome.exit_status.startswith("max_iterations_reached")
    # step_limit 4 = 3 tool iterations plus hermes's own tool-less summary call.
    assert len(proxy.engine.requests) == 4 and "tools" not in proxy.engine.requests[-1]
    assert (tmp_path / "ws" / "log.txt").read_text().split() == ["0", "1", "2"]


def test_dead_endpoint_is_an_error_within_the_limit(hermes, tmp_path):
    with DescendantWatcher() as watcher:
        start = time.monotonic()
        outcome = hermes.run(tmp_path / "ws", "Do it.", base_url="http://127.0.0.1:9/v1", api_key="k" * 8,
                             step_limit=5, timeout_s=90, rollout_dir=tmp_path / "r")  # fmt: skip
        elapsed = time.monotonic() - start
    assert outcome.exit_kind == "error" and outcome.returncode == 1, outcome
    assert "Connection error" in outcome.error
    assert elapsed < 90
    assert watcher.alive() == []


def test_missing_binary_names_the_install_command(tmp_path):
    harness = Hermes(tools=tmp_path / "no-tools")
    assert not harness.is_installed()
    with pytest.raises(HarnessNotInstalledError, match="python -m harness_rl.harnesses install hermes"):
        harness.run(tmp_path / "ws", "x", base_url="http://127.0.0.1:9/v1", api_key="k", step_limit=1,
                    timeout_s=5, rollout_dir=tmp_path / "r")  # fmt: skip
