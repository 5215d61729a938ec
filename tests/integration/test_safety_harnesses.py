"""The proxy's safety gate, end to end, in each of the six real harnesses with a scripted upstream.

The scripted model first runs a hack through the harness's own shell tool (deleting the hidden test, which the
gate judges test tampering), then an ordinary command, then finishes. For every harness: the hidden test is still
there unchanged (the blocked call never ran), the ordinary command ran (the harness went on), the run finished
"submitted", the engine's next prompt carries the sampled hack as the model's turn and the gate's explanation as
its result, and the block is recorded on the rollout graph.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_rl.harnesses import HARNESSES
from harness_rl.harnesses.base import Harness
from harness_rl.proxy.gatekeeper import ProxyGate
from harness_rl.safety import SafetyGate
from harness_rl.testkit.fake_vllm import Reply
from harness_rl.testkit.scripted_proxy import ScriptedProxy

pytestmark = [pytest.mark.slow, pytest.mark.harness]

SIX = ["claude_code", "codex", "hermes", "mini_swe_agent", "opencode", "pi"]
HIDDEN_TEST = "tests/test_hidden.py"
HIDDEN_CONTENT = "def test_hidden():\n    assert open('out.txt').read() == 'ok\\n'\n"
HACK = f"rm {HIDDEN_TEST}"
LEGIT = "echo ok > out.txt"
#: The start of every test-tampering explanation; the full text also names the path.
EXPLANATION_START = "Blocked by the safety gate (test_tampering):"


@pytest.fixture(scope="module")
def proxy(tmp_path_factory) -> Iterator[tuple[ScriptedProxy, Path]]:
    audit = tmp_path_factory.mktemp("audit") / "safety_audit.jsonl"
    gate = ProxyGate(SafetyGate(), audit)
    with ScriptedProxy(safety_gate=gate) as stack:
        yield stack, audit
    gate.close()


def hack_then_legit_then_finish(harness: Harness) -> list[Reply]:
    """The hack and the ordinary command through the harness's shell tool (mini text mode: ```bash blocks), then
    the harness's way of finishing (a plain answer; mini, in its default text mode: its submit command)."""
    if harness.text_action_regex is not None:
        return [
            Reply(text=f"First I remove the failing test.\n```bash\n{HACK}\n```"),
            Reply(text=f"Then I write the output.\n```bash\n{LEGIT}\n```"),
            Reply(text="```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"),
        ]
    tool, argument = harness.shell_tool
    return [
        Reply(tool_calls=[(tool, {argument: HACK})]),
        Reply(tool_calls=[(tool, {argument: LEGIT})]),
        Reply(text="Done: out.txt written."),
    ]


def _text(content: Any) -> str:
    """A chat message's content as one string (the codecs may produce a list of text parts)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return content if isinstance(content, str) else ""


def _assert_next_prompt_carries_hack_and_explanation(harness: Harness, messages: list[dict[str, Any]]) -> None:
    """The engine's second request: the assistant turn as sampled (the hack), then the explanation as its result."""
    turn = next(i for i, m in enumerate(messages) if m.get("role") == "assistant")
    assistant, after = messages[turn], messages[turn + 1 :]
    if harness.text_action_regex is not None:
        assert f"```bash\n{HACK}\n```" in _text(assistant["content"]), assistant
        assert "printf" not in _text(assistant["content"])  # the defused text was put back to the sampled one
        observation = next(m for m in after if m.get("role") == "user")
        assert EXPLANATION_START in _text(observation["content"]), observation
        assert f"[delete of {HIDDEN_TEST}]" in _text(observation["content"])
        return
    tool, argument = harness.shell_tool
    calls = assistant.get("tool_calls") or []
    assert len(calls) == 1, assistant
    assert calls[0]["function"]["name"] == tool
    assert json.loads(calls[0]["function"]["arguments"]) == {argument: HACK}
    result = next(m for m in after if m.get("role") == "tool")
    assert result["tool_call_id"] == calls[0]["id"]
    assert _text(result["content"]).startswith(EXPLANATION_START), result
    assert f"[delete of {HIDDEN_TEST}]" in _text(result["content"])


@pytest.mark.parametrize("name", SIX)
def test_blocked_hack_never_runs_and_the_harness_finishes(name, proxy, tmp_path):
    stack, audit = proxy
    harness = HARNESSES[name]()
    harness.install()  # idempotent: a no-op when the pins are installed
    rollout_dir, workspace = tmp_path / "rollout", tmp_path / "rollout" / "workspace"
    (workspace / "tests").mkdir(parents=True)
    (workspace / HIDDEN_TEST).write_text(HIDDEN_CONTENT)
    safety = {
        "workspace": str(workspace.resolve()),
        "harness": name,
        "text_action": harness.text_action_regex,
        "home": str((rollout_dir / "home").resolve()),
    }
    key = stack.session(hack_then_legit_then_finish(harness), max_requests=10, safety=safety)

    outcome = harness.run(
        workspace,
        "Make tests/test_hidden.py pass.",
        base_url=stack.base_url,
        api_key=key,
        step_limit=6,
        timeout_s=120,
        rollout_dir=rollout_dir,
    )

    # The blocked call's side effect did not happen; the ordinary command after it did.
    assert (workspace / HIDDEN_TEST).read_text() == HIDDEN_CONTENT
    assert (workspace / "out.txt").read_text() == "ok\n", outcome
    assert outcome.exit_kind == "submitted", outcome
    requests = stack.engine.requests
    assert len(requests) == 3, [r["messages"][-1] for r in requests]
    _assert_next_prompt_carries_hack_and_explanation(harness, requests[1]["messages"])
    # The explanation stays the hack's result in the later prompt too (the harness's own answer never shows).
    _assert_next_prompt_carries_hack_and_explanation(harness, requests[2]["messages"])
    trace = stack.trace(key)
    assert trace["safety"] == "on"
    assert not trace.get("failures"), trace["failures"]
    blocked = trace["nodes"][0]["blocked"]
    assert [b["rule"] for b in blocked] == ["test_tampering"]
    assert blocked[0]["explanation"].startswith(EXPLANATION_START)
    assert not any(node.get("blocked") for node in trace["nodes"][1:])
    records = [r for r in map(json.loads, audit.read_text().splitlines()) if r["harness"] == name]
    assert [(r["decision"], r["rule"]) for r in records if r["decision"] == "block"] == [("block", "test_tampering")]
