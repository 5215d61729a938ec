"""The proxy's request budget follows the harness's step limit: a harness whose own limit is soft (opencode,
codex) is stopped by the proxy at ``step_limit`` calls; a hard-limited one keeps the looser safety-net budget."""

from __future__ import annotations

import time

import openai
import pytest

from harness_rl.envs.smoke import smoke_task
from harness_rl.harnesses import HARNESSES
from harness_rl.harnesses.base import Harness, HarnessOutcome
from harness_rl.rollout.proxy_admin import ProxyAdmin
from harness_rl.rollout.session import RolloutSettings, request_budget, run_rollout
from harness_rl.testkit.scripted_proxy import ScriptedProxy

SETTINGS = RolloutSettings(
    step_limit=3, max_requests=5, timeout_s=30, verifier_timeout_s=10, temperature=0.8, max_tokens=32
)


class LoopingHarness:
    """Keeps calling the model (up to 8 times) whatever ``step_limit`` says, like a harness without a hard
    limit; stops early when the proxy's budget reply arrives (a plain answer that says so)."""

    name = "looping"
    dialect = "openai_chat"
    shell_tool = ("bash", "command")

    def __init__(self, hard: bool) -> None:
        self.step_limit_is_hard = hard

    def run(self, task_workspace, instruction, *, base_url, api_key, step_limit, timeout_s, rollout_dir):
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        messages = [{"role": "user", "content": instruction}]
        start, calls = time.monotonic(), 0
        for _ in range(8):
            reply = client.chat.completions.create(model="m", messages=messages)
            calls += 1
            messages += [{"role": "assistant", "content": reply.choices[0].message.content or ""},
                         {"role": "user", "content": "go on"}]  # fmt: skip
        return HarnessOutcome("submitted", 0, calls, "", None, time.monotonic() - start, False)


@pytest.mark.parametrize("name, budget", [("pi", 5), ("hermes", 5), ("claude_code", 5), ("mini_swe_agent", 5),
                                          ("opencode", 3), ("codex", 3)])  # fmt: skip
def test_budget_of_each_adapter(name, budget):
    harness = HARNESSES[name]()
    assert isinstance(harness, Harness)  # the protocol, with step_limit_is_hard and shell_tool
    assert isinstance(harness.step_limit_is_hard, bool) and len(harness.shell_tool) == 2
    assert request_budget(harness, SETTINGS) == budget


def test_undeclared_limit_counts_as_soft():
    class Bare:
        name = "bare"

    assert request_budget(Bare(), SETTINGS) == SETTINGS.step_limit


@pytest.mark.parametrize("hard, engine_calls", [(False, 3), (True, 5)])
def test_the_proxy_enforces_the_budget_in_a_rollout(tmp_path, hard, engine_calls):
    task = smoke_task("t", "out.txt", "apple")
    with ScriptedProxy() as proxy:
        proxy.engine.reset([])
        admin = ProxyAdmin(proxy.url, proxy.admin_token)
        try:
            result = run_rollout(task=task, harness=LoopingHarness(hard), proxy=admin, adapter=None,
                                 settings=SETTINGS, rollout_dir=tmp_path / "r")  # fmt: skip
        finally:
            admin.close()
        assert len(proxy.engine.requests) == engine_calls  # the rest were answered by the proxy itself
    assert result.outcome.n_turns == 8 and result.trace["requests"] == 8
    assert sum(1 for n in result.trace["nodes"] if n["budget_exhausted"]) == 8 - engine_calls
    # A run that loops until its budget is an attempt like any other: scored by its verifier (nothing solved: 0).
    assert result.unscorable is None and result.score == 0.0
    assert result.end_reason == "request_budget" and result.summary()["end_reason"] == "request_budget"
