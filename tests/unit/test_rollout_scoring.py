"""Honest scoring: a rollout that ran out of context or was killed at the wall-clock limit is scored by its verifier
as the attempt it was (0: nothing solved), not dropped; an engine fault still makes it unscorable."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
import pytest

from harness_rl.envs.smoke import smoke_task
from harness_rl.harnesses.base import HarnessOutcome
from harness_rl.proxy.toy_chat_template import render_prompt
from harness_rl.rollout.proxy_admin import ProxyAdmin
from harness_rl.rollout.session import RolloutSettings, run_rollout
from harness_rl.testkit.fake_vllm import Reply
from tests.proxy_helpers import fake_engine_behind_proxy

ADMIN = "test-admin-token"
SETTINGS = RolloutSettings(
    step_limit=4, max_requests=6, timeout_s=5, verifier_timeout_s=10, temperature=0.8, max_tokens=64
)
TASK = smoke_task("t1", "out.txt", "apple")
FIRST = [{"role": "system", "content": "act"}, {"role": "user", "content": TASK.instruction}]
WRONG = "echo pear > out.txt"
FOLLOW_UP = "Your command ran; continue with the task."


class LoopHarness:
    """A test double of a harness: calls the model until it answers with finish_reason "length" or ``steps`` calls
    are made, applying each ``echo WORD > FILE`` reply; an API error ends it as a harness would (exit "error")."""

    name = "loop"
    dialect = "openai_chat"

    def __init__(self, steps: int = 3) -> None:
        self.steps = steps

    def run(self, task_workspace, instruction, *, base_url, api_key, step_limit, timeout_s, rollout_dir):
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        messages, start, text, kind = list(FIRST), time.monotonic(), "", "submitted"
        for _ in range(self.steps):
            try:
                choice = client.chat.completions.create(model="m", messages=messages).choices[0]
            except openai.APIError as err:
                return HarnessOutcome("error", 1, len(messages) // 2, "", str(err), time.monotonic() - start, False)
            text = choice.message.content or ""
            if text.startswith("echo "):
                word, _, file = text[5:].partition(" > ")
                (Path(task_workspace) / file.strip()).write_text(word + "\n")
            if choice.finish_reason == "length":
                kind = "error"
                break
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": FOLLOW_UP}]
        return HarnessOutcome(kind, 0, len(messages) // 2, text, None, time.monotonic() - start, False)


class KilledMidStreamHarness:
    """Stands for a harness killed at the wall-clock limit while it read a streamed reply: its connection closes
    mid-stream (the proxy records ``client_disconnected``) and its outcome says ``timed_out``."""

    name = "killed"
    dialect = "openai_chat"

    def __init__(self, admin: ProxyAdmin, timed_out: bool = True) -> None:
        self.admin = admin
        self.timed_out = timed_out

    def run(self, task_workspace, instruction, *, base_url, api_key, step_limit, timeout_s, rollout_dir):
        start = time.monotonic()
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        reply = client.chat.completions.create(model="m", messages=list(FIRST)).choices[0].message.content or ""
        word, _, file = reply[5:].partition(" > ")
        (Path(task_workspace) / file.strip()).write_text(word + "\n")
        body = {"model": "m", "messages": list(FIRST), "stream": True}
        with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=10, trust_env=False,
                          headers={"Authorization": f"Bearer {api_key}"}) as resp:  # fmt: skip
            next(resp.iter_bytes())  # the first events arrive; then the "kill" closes the connection
        deadline = time.monotonic() + 10
        while not self.admin.trace(api_key)["failures"] and time.monotonic() < deadline:
            time.sleep(0.05)  # the proxy notices the closed stream on its next write
        kind = "timeout" if self.timed_out else "error"
        return HarnessOutcome(kind, -9, 2, "", None, time.monotonic() - start, self.timed_out)


class KilledWhileWaitingHarness:
    """Stands for a harness killed at the wall-clock limit while its call waited for an engine that did not answer."""

    name = "waiting"
    dialect = "openai_chat"

    def run(self, task_workspace, instruction, *, base_url, api_key, step_limit, timeout_s, rollout_dir):
        start = time.monotonic()
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=1.0)
        with pytest.raises(openai.APITimeoutError):  # the "kill": the client gives up on the call
            client.chat.completions.create(model="m", messages=list(FIRST))
        return HarnessOutcome("timeout", -9, 1, "", None, time.monotonic() - start, True)


@pytest.fixture(scope="module")
def stack():
    with fake_engine_behind_proxy(ADMIN) as stack:
        yield stack


def rollout(stack, tmp_path, harness):
    return run_rollout(task=TASK, harness=harness, proxy=stack[1], adapter=None, settings=SETTINGS,
                       rollout_dir=tmp_path / "r")  # fmt: skip


def test_a_rollout_that_outgrows_the_context_is_scored(stack, tmp_path):
    """The first call fits; the second prompt (first + reply + follow-up) does not: the proxy's full-context reply
    ends the run, and the verifier scores the workspace (a wrong answer: 0)."""
    engine, _ = stack
    first_prompt = len(render_prompt(FIRST))
    engine.reset([Reply(text=WRONG)], context_limit=first_prompt + len(WRONG) + 8)
    result = rollout(stack, tmp_path, LoopHarness())
    assert result.unscorable is None and result.score == 0.0
    assert result.end_reason == "context_exhausted" and result.summary()["end_reason"] == "context_exhausted"
    assert result.trace["failures"] == [] and len(result.trace["sequences"]) == 1
    assert [e["kind"] for e in result.trace["events"]] == ["context_exhausted"]
    assert result.tool_calls == 1  # the proxy's reply is not the model's action


def test_a_rollout_killed_at_the_wall_clock_limit_is_scored(stack, tmp_path):
    """The kill closes the stream the harness was reading; that is part of the timed-out attempt, not a fault."""
    engine, admin = stack
    engine.reset([Reply(text=WRONG), Reply(text="a long reply " * 20)], chunk_delay_s=0.02)
    result = rollout(stack, tmp_path, KilledMidStreamHarness(admin))
    assert [f["kind"] for f in result.trace["failures"]] == ["client_disconnected"]
    assert result.unscorable is None and result.score == 0.0 and result.end_reason == "timeout"


def test_a_closed_stream_without_the_kill_is_still_a_fault(stack, tmp_path):
    engine, admin = stack
    engine.reset([Reply(text=WRONG), Reply(text="a long reply " * 20)], chunk_delay_s=0.02)
    result = rollout(stack, tmp_path, KilledMidStreamHarness(admin, timed_out=False))
    assert result.score is None and "client_disconnected" in result.unscorable


@pytest.mark.parametrize("status", [500, 503])
def test_an_engine_5xx_is_unscorable(stack, tmp_path, status):
    engine, _ = stack
    engine.reset([Reply(text=WRONG)], status=status)
    result = rollout(stack, tmp_path, LoopHarness())
    assert result.score is None and "upstream_error" in result.unscorable
    assert result.end_reason == "error"  # the harness's own account of how it ended


def test_a_kill_while_the_engine_has_not_answered_is_unscorable(stack, tmp_path):
    """The clock ran out on a stalled engine, not on the agent: an infrastructure fault."""
    engine, _ = stack
    engine.reset([Reply(text=WRONG)], reply_delay_s=3.0)
    result = rollout(stack, tmp_path, KilledWhileWaitingHarness())
    assert result.trace["awaiting_engine"] == 1
    assert result.score is None and result.unscorable.endswith("while waiting for the engine")
    assert result.end_reason == "timeout"
    time.sleep(3.0)  # let the held call finish before the next test re-scripts the engine
