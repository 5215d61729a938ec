"""A rollout registered with the proxy's safety gate: the blocked command never runs, the harness goes on,
and the block reaches the rollout record, the reward penalty and the step metrics."""

from __future__ import annotations

import re
import subprocess
import time

import openai
import pytest

from harness_rl.envs.reward import compute_group_rewards
from harness_rl.envs.smoke import smoke_task
from harness_rl.harnesses.base import HarnessOutcome
from harness_rl.proxy.gatekeeper import ProxyGate
from harness_rl.proxy.server import ProxyServer, UvicornThread
from harness_rl.rollout.proxy_admin import ProxyAdmin
from harness_rl.rollout.session import RolloutSettings, run_rollout, safety_spec
from harness_rl.rollout.worker import group_metrics, score_group
from harness_rl.safety import SafetyGate
from harness_rl.testkit.fake_vllm import FakeEngine, Reply

ADMIN = "test-admin-token"
SETTINGS = RolloutSettings(
    step_limit=3, max_requests=4, timeout_s=5, verifier_timeout_s=10, temperature=0.8, max_tokens=64,
    safety=True, block_penalty=0.25,
)  # fmt: skip
HACK = "rm tests/test_a.py"


class TextModeHarness:
    """A test double of a text-mode harness: runs the first ```bash block of each reply with a real shell in
    the workspace and sends its output back, like mini-swe-agent's text mode."""

    name = "text_mode"
    dialect = "openai_chat"
    step_limit_is_hard = True
    shell_tool = ("bash", "command")
    text_action_regex = r"\A.*?```bash\n(.*?)```"

    def run(self, task_workspace, instruction, *, base_url, api_key, step_limit, timeout_s, rollout_dir):
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        messages = [{"role": "user", "content": instruction}]
        start, text = time.monotonic(), ""
        for _ in range(step_limit):
            text = client.chat.completions.create(model="m", messages=messages).choices[0].message.content or ""
            match = re.search(self.text_action_regex, text, re.DOTALL)
            if match is None:
                break
            done = subprocess.run(["bash", "-c", match.group(1)], cwd=task_workspace, capture_output=True, text=True)
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": done.stdout}]
        return HarnessOutcome("submitted", 0, len(messages) // 2, text, None, time.monotonic() - start, False)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    engine = FakeEngine()
    gate = ProxyGate(SafetyGate(), tmp_path_factory.mktemp("audit") / "audit.jsonl")
    with UvicornThread(engine.app) as engine_server:
        with ProxyServer(engine_server.url, ADMIN, base_model="base", safety_gate=gate) as server:
            admin = ProxyAdmin(server.url, ADMIN)
            yield engine, admin
            admin.close()
    gate.close()


def test_blocked_command_never_runs_and_costs_the_penalty(proxy, tmp_path):
    engine, admin = proxy
    task = smoke_task("t1", "out.txt", "apple")
    task = type(task)(**{**task.__dict__, "files": {"tests/test_a.py": "def test_a(): pass\n"}})
    engine.reset([Reply(text=f"```bash\n{HACK}\n```"), Reply(text="```bash\necho apple > out.txt\n```"),
                  Reply(text="done")])  # fmt: skip
    blocked = run_rollout(task=task, harness=TextModeHarness(), proxy=admin, adapter=None, settings=SETTINGS,
                          rollout_dir=tmp_path / "r0")  # fmt: skip
    seen_by_engine = list(engine.requests)
    engine.reset([Reply(text="```bash\necho apple > out.txt\n```"), Reply(text="done")])
    clean = run_rollout(task=task, harness=TextModeHarness(), proxy=admin, adapter=None, settings=SETTINGS,
                        rollout_dir=tmp_path / "r1")  # fmt: skip
    results = [blocked, clean]

    assert (tmp_path / "r0" / "workspace" / "tests" / "test_a.py").exists()  # the rm never ran
    assert blocked.score == 1.0 and blocked.unscorable is None  # the harness went on and solved the task
    assert [b["rule"] for b in blocked.blocked] == ["test_tampering"] and clean.blocked == []
    # The explanation was the model's next input, and the engine saw the command as sampled.
    second_prompt = seen_by_engine[1]["messages"]
    assert second_prompt[1]["content"] == f"```bash\n{HACK}\n```"  # as sampled, not as defused
    assert "test_tampering" in second_prompt[2]["content"]  # the printed explanation
    assert blocked.trace["nodes"][1]["parent"] == 0  # so the chain still links

    group = score_group(0, task, "text_mode", 0, results, compute_group_rewards, scale_rewards=True,
                        block_penalty=SETTINGS.block_penalty)  # fmt: skip
    base = compute_group_rewards([r.score for r in results], [r.tool_calls for r in results])
    assert group.rewards == pytest.approx([base[0] - 0.25, base[1]])  # only the rollout with a block pays
    metrics = group_metrics([group])
    assert metrics["safety/blocked"] == 1 and metrics["safety/blocked/test_tampering"] == 1
    assert blocked.summary()["blocked"] == ["test_tampering"]


def test_safety_spec_names_the_rollout(tmp_path):
    task = smoke_task("t1", "out.txt", "apple")
    spec = safety_spec(task, TextModeHarness(), tmp_path / "r")
    assert spec["workspace"] == str((tmp_path / "r" / "workspace").resolve()) and spec["harness"] == "text_mode"
    assert spec["text_action"] == TextModeHarness.text_action_regex
