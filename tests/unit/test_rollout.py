"""A rollout is registered with the proxy, traced, verified and scored as the attempt it was, however it ended (a
harness killed at its wall-clock limit included); an infrastructure fault (a crashing verifier, no captured call)
marks it unscorable instead of giving it reward 0."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import openai
import pytest

from harness_rl.envs.reward import compute_group_rewards
from harness_rl.envs.smoke import smoke_task
from harness_rl.envs.task import Task
from harness_rl.harnesses.base import HarnessOutcome
from harness_rl.proxy.export import read_trace_jsonl
from harness_rl.rollout.session import RolloutSettings, count_tool_calls, run_rollout
from harness_rl.rollout.worker import score_group
from harness_rl.testkit.fake_vllm import Reply
from tests.proxy_helpers import fake_engine_behind_proxy

ADMIN = "test-admin-token"
SETTINGS = RolloutSettings(
    step_limit=3, max_requests=4, timeout_s=5, verifier_timeout_s=10, temperature=0.8, max_tokens=64
)


class ScriptedHarness:
    """A test double of the Harness protocol: asks the proxy once per step with the real openai SDK, and
    applies each reply's ```bash block by writing the file it names (enough for the smoke tasks)."""

    name = "scripted"
    dialect = "openai_chat"

    def __init__(self, steps: int = 2, timed_out: bool = False):
        self.steps = steps
        self.timed_out = timed_out

    def run(self, task_workspace, instruction, *, base_url, api_key, step_limit, timeout_s, rollout_dir):
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        messages = [{"role": "system", "content": "act"}, {"role": "user", "content": instruction}]
        start, text = time.monotonic(), ""
        for _ in range(min(self.steps, step_limit)):
            reply = client.chat.completions.create(model="anything", messages=messages)
            text = reply.choices[0].message.content or ""
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "ok"}]
            if text.startswith("echo "):
                word, _, file = text[5:].partition(" > ")
                (Path(task_workspace) / file.strip()).write_text(word + "\n")
        kind = "timeout" if self.timed_out else "submitted"
        return HarnessOutcome(kind, 0, self.steps, text, None, time.monotonic() - start, self.timed_out)


@pytest.fixture(scope="module")
def proxy():
    with fake_engine_behind_proxy(ADMIN) as stack:
        yield stack


def _rollout(proxy, tmp_path, harness, task, replies):
    engine, admin = proxy
    engine.reset([Reply(text=t) for t in replies])
    return run_rollout(task=task, harness=harness, proxy=admin, adapter=None, settings=SETTINGS,
                       rollout_dir=tmp_path / "r0")  # fmt: skip


def test_solved_rollout_is_scored_and_traced(proxy, tmp_path):
    task = smoke_task("t1", "out.txt", "apple")
    result = _rollout(proxy, tmp_path, ScriptedHarness(), task, ["thinking", "echo apple > out.txt"])
    assert result.unscorable is None
    assert result.score == 1.0 and result.end_reason == "submitted"
    assert result.tool_calls == 2
    assert result.trace["requests"] == 2
    assert len(result.trace["sequences"]) == 1  # the second call extends the first
    assert read_trace_jsonl(tmp_path / "r0" / "trace.jsonl") == result.trace


def test_wrong_answer_scores_zero_not_unscorable(proxy, tmp_path):
    task = smoke_task("t1", "out.txt", "apple")
    result = _rollout(proxy, tmp_path, ScriptedHarness(), task, ["echo pear > out.txt", "done"])
    assert result.unscorable is None and result.score == 0.0


# Until issue 12 a timed-out harness was unscorable, which dropped slow attempts from their groups and biased
# learning towards short easy ones: the verifier now scores the workspace the killed harness left.
@pytest.mark.parametrize("reply, score", [("echo pear > out.txt", 0.0), ("echo apple > out.txt", 1.0)])
def test_timed_out_harness_is_scored_as_its_attempt(proxy, tmp_path, reply, score):
    task = smoke_task("t1", "out.txt", "apple")
    result = _rollout(proxy, tmp_path, ScriptedHarness(timed_out=True), task, [reply, "x"])
    assert result.unscorable is None and result.score == score
    assert result.end_reason == "timeout" and result.summary()["end_reason"] == "timeout"


def test_crashing_verifier_is_unscorable(proxy, tmp_path):
    task = Task(id="crash", instruction="anything",
                verifier={"kind": "command", "argv": [sys.executable, "-c", "raise SystemExit(3)"]})  # fmt: skip
    result = _rollout(proxy, tmp_path, ScriptedHarness(), task, ["a", "b"])
    assert result.score is None
    assert "verifier failed" in result.unscorable


def test_harness_without_engine_call_is_unscorable(proxy, tmp_path):
    task = smoke_task("t1", "out.txt", "apple")
    result = _rollout(proxy, tmp_path, ScriptedHarness(steps=0), task, [])
    assert result.score is None
    assert "no training sequence" in result.unscorable


def test_group_scoring_excludes_unscorable_rollouts(proxy, tmp_path):
    task = smoke_task("t1", "out.txt", "apple")
    results = []
    # The third harness makes no engine call: nothing was captured, so it is unscorable.
    for i, (replies, steps) in enumerate([(["echo apple > out.txt", "x"], 2), (["no", "no"], 2), ([], 0)]):
        results.append(_rollout(proxy, tmp_path / str(i), ScriptedHarness(steps=steps), task, replies))
    group = score_group(7, task, "scripted", 3, results, compute_group_rewards, scale_rewards=True)
    assert group.rewards[0] == pytest.approx(1.0) and group.rewards[1] == 0.0 and group.rewards[2] is None
    assert group.advantages[0] > 0 > group.advantages[1] and group.advantages[2] is None
    assert group.informative
    # Only scorable rollouts become samples, each tagged with its group, version and advantage.
    assert {s["rollout_index"] for s in group.samples} == {0, 1}
    for sample in group.samples:
        assert sample["group_id"] == 7 and sample["policy_version"] == 3
        assert len(sample["input_ids"]) == len(sample["completion_mask"]) == len(sample["old_log_probs"])
        assert sample["old_log_probs"][sample["completion_mask"] == 0].abs().sum() == 0


def test_tool_calls_counted_from_graph():
    trace = {"nodes": [
        {"tool_calls": [{"id": 1}, {"id": 2}], "budget_exhausted": False},
        {"tool_calls": [], "budget_exhausted": False},
        {"tool_calls": [], "budget_exhausted": True},
    ]}  # fmt: skip
    assert count_tool_calls(trace) == 2
    text_mode = {"nodes": [{"tool_calls": []}, {"tool_calls": []}, {"budget_exhausted": True}]}
    assert count_tool_calls(text_mode) == 2


def test_task_folder_rollout_is_verified_by_its_tests_in_the_sandbox(proxy, tmp_path):
    from harness_rl.envs import read_task_dir, write_task_dir
    from harness_rl.envs.sources.smoke import smoke_spec

    task = read_task_dir(write_task_dir(smoke_spec("smoke-t", "out.txt", "apple", "train"), tmp_path / "tasks"))
    solved = _rollout(proxy, tmp_path / "a", ScriptedHarness(), task, ["thinking", "echo apple > out.txt"])
    assert solved.unscorable is None and solved.score == 1.0
    verifier = tmp_path / "a" / "r0" / "verifier"
    assert json.loads((verifier / "logs" / "reward.json").read_text()) == {"reward": 1.0}
    assert not (verifier / "tests").exists()  # the copy of tests/ is gone once the verifier ended
    wrong = _rollout(proxy, tmp_path / "b", ScriptedHarness(), task, ["echo pear > out.txt", "done"])
    assert wrong.unscorable is None and wrong.score == 0.0


def test_group_rewards_are_logged_by_component(proxy, tmp_path):
    from harness_rl.rollout.worker import group_metrics

    task = smoke_task("t1", "out.txt", "apple")
    results = [
        _rollout(proxy, tmp_path / "0", ScriptedHarness(steps=1), task, ["echo apple > out.txt"]),
        _rollout(proxy, tmp_path / "1", ScriptedHarness(steps=3), task, ["a", "b", "echo apple > out.txt"]),
        _rollout(proxy, tmp_path / "2", ScriptedHarness(steps=2), task, ["no", "no"]),
    ]
    results[1].blocked = [{"rule": "r"}, {"rule": "r"}]
    group = score_group(1, task, "scripted", 0, results, scale_rewards=True, efficiency_bonus=0.2, block_penalty=0.05)
    # mean tool calls = (1 + 3 + 2) / 3 = 2: the quick correct rollout gets 0.2 * (2 - 1) / 2
    assert results[0].reward_parts == {"correctness": 1.0, "efficiency": pytest.approx(0.1), "block_penalty": 0.0,
                                       "total": pytest.approx(1.1)}  # fmt: skip
    assert results[1].reward_parts["block_penalty"] == pytest.approx(0.1) and results[1].reward == pytest.approx(0.9)
    assert results[2].reward == 0.0
    metrics = group_metrics([group])
    assert metrics["reward/correctness"] == pytest.approx(2 / 3)
    assert metrics["reward/efficiency"] == pytest.approx(0.1 / 3)
    assert metrics["reward/block_penalty"] == pytest.approx(0.1 / 3)
    assert metrics["reward/mean"] == pytest.approx((1.1 + 0.9 + 0.0) / 3)
    assert results[0].summary()["reward_parts"]["total"] == pytest.approx(1.1)
