"""The safety gate inside the proxy: blocked calls reach the client defused in every dialect (streamed or not),
come back to the engine as sampled with the explanation as their result, and are recorded and audited."""

import json

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types

from harness_rl.proxy.gatekeeper import BLOCKED_TOOL, ProxyGate
from harness_rl.proxy.server import ProxyServer, UvicornThread
from harness_rl.safety import SafetyGate
from harness_rl.testkit.fake_vllm import FakeEngine, Reply
from tests.proxy_helpers import new_session, trace

ADMIN = "admin-secret"
HACK = "rm tests/test_hidden.py"
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}
READ = {
    "type": "function",
    "function": {
        "name": "read",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
USER = {"role": "user", "content": "Make the tests pass."}
SAFETY = {"workspace": "/work/ws", "harness": "pi"}
MINI_REGEX = r"\A.*?```(?:bash|sh|shell)[ \t]*\n(.*?)```"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    audit = tmp_path_factory.mktemp("audit") / "safety_audit.jsonl"
    gate = ProxyGate(SafetyGate(), audit)
    engine = FakeEngine()
    with UvicornThread(engine.app) as engine_server:
        with ProxyServer(engine_server.url, ADMIN, base_model="base-model", safety_gate=gate) as proxy:
            admin = httpx.Client(base_url=proxy.url, headers={"Authorization": f"Bearer {ADMIN}"}, trust_env=False)
            yield engine, proxy, admin, audit
            admin.close()
    gate.close()


@pytest.fixture
def stack(servers):
    engine, proxy, admin, audit = servers
    engine.reset()
    return engine, proxy, admin, audit


def chat(proxy, key):
    return openai.OpenAI(
        base_url=proxy.url + "/v1", api_key=key, max_retries=0, http_client=httpx.Client(trust_env=False)
    )


def sent_messages(engine, i):
    return engine.requests[i]["messages"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_blocked_chat_call_is_defused_restored_and_recorded(stack, stream):
    engine, proxy, admin, audit = stack
    engine.reset([Reply(text="Let me clean up.", tool_calls=[("bash", {"command": HACK})]), Reply(text="ok")])
    key = new_session(admin, safety=SAFETY)
    client = chat(proxy, key)

    if stream:
        chunks = list(client.chat.completions.create(model="m", messages=[USER], tools=[BASH], stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        assert len(calls) == 1  # released whole, once the reply was complete
        call_id, name, arguments = calls[0].id, calls[0].function.name, calls[0].function.arguments
    else:
        message = client.chat.completions.create(model="m", messages=[USER], tools=[BASH]).choices[0].message
        text, (call,) = message.content, message.tool_calls
        call_id, name, arguments = call.id, call.function.name, call.function.arguments
    assert text == "Let me clean up."  # text is not held back or changed
    command = json.loads(arguments)["command"]
    assert name == "bash" and command.startswith("printf ") and "test_tampering" in command and HACK not in command

    # The harness runs the harmless command and answers with its output; the engine sees the sampled call and
    # the explanation as its result instead.
    assistant = {"role": "assistant", "content": text, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}  # fmt: skip
    result = {"role": "tool", "tool_call_id": call_id, "content": "Blocked by the safety gate ..."}
    second = client.chat.completions.create(model="m", messages=[USER, assistant, result], tools=[BASH], stream=stream)
    if stream:
        list(second)  # the call is recorded when its stream ends
    restored = sent_messages(engine, 1)
    assert json.loads(restored[1]["tool_calls"][0]["function"]["arguments"]) == {"command": HACK}
    t = trace(admin, key)
    (block,) = t["nodes"][0]["blocked"]
    assert block["rule"] == "test_tampering" and block["tool"] == "bash" and block["call_id"] == call_id
    assert restored[2]["content"] == block["explanation"] and "test_tampering" in block["explanation"]
    assert t["nodes"][0]["tool_calls"][0]["function"]["arguments"] == json.dumps({"command": HACK}, sort_keys=True)
    assert [n["parent"] for n in t["nodes"]] == [None, 0]  # the sampled call is still in the chain
    assert t["safety"] == "on"

    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert any(r["decision"] == "block" and r["call_id"] == call_id and r["rule"] == "test_tampering" for r in records)


def test_allowed_calls_pass_unchanged_and_are_audited(stack):
    engine, proxy, admin, audit = stack
    engine.reset([Reply(tool_calls=[("bash", {"command": "pytest tests/"})])])
    key = new_session(admin, safety=SAFETY)
    message = chat(proxy, key).chat.completions.create(model="m", messages=[USER], tools=[BASH]).choices[0].message
    assert json.loads(message.tool_calls[0].function.arguments) == {"command": "pytest tests/"}
    assert trace(admin, key)["nodes"][0]["blocked"] == []
    last = json.loads(audit.read_text().splitlines()[-1])
    assert last["decision"] == "allow" and last["tool"] == "bash" and "pytest tests/" in last["arguments"]


def test_without_a_shell_tool_the_call_is_renamed_to_a_tool_that_does_not_exist(stack):
    engine, proxy, admin, _ = stack
    engine.reset([Reply(tool_calls=[("read", {"path": "/tests/test_hidden.py"})])])
    key = new_session(admin, safety=SAFETY)
    message = chat(proxy, key).chat.completions.create(model="m", messages=[USER], tools=[READ]).choices[0].message
    (call,) = message.tool_calls
    assert (
        call.function.name == BLOCKED_TOOL and "verifier_access" in json.loads(call.function.arguments)["explanation"]
    )


def test_sessions_without_a_safety_spec_are_not_inspected(stack):
    engine, proxy, admin, _ = stack
    engine.reset([Reply(tool_calls=[("bash", {"command": HACK})])])
    key = new_session(admin)
    message = chat(proxy, key).chat.completions.create(model="m", messages=[USER], tools=[BASH]).choices[0].message
    assert json.loads(message.tool_calls[0].function.arguments) == {"command": HACK}
    assert trace(admin, key)["safety"] == "off"


def test_text_mode_actions_are_judged_and_restored(stack):
    engine, proxy, admin, _ = stack
    reply = f"Cleaning up.\n```bash\n{HACK}\n```\nThen done."
    engine.reset([Reply(text=reply), Reply(text="ok")])
    key = new_session(admin, safety={**SAFETY, "harness": "mini_swe_agent", "text_action": MINI_REGEX})
    client = chat(proxy, key)
    content = client.chat.completions.create(model="m", messages=[USER]).choices[0].message.content
    assert (
        HACK not in content and content.startswith("Cleaning up.\n```bash\nprintf ") and content.endswith("Then done.")
    )
    observation = {"role": "user", "content": "<output>Blocked by the safety gate</output>"}
    client.chat.completions.create(model="m", messages=[USER, {"role": "assistant", "content": content}, observation])
    assert sent_messages(engine, 1)[1]["content"] == reply
    t = trace(admin, key)
    assert t["nodes"][0]["blocked"][0]["rule"] == "test_tampering" and t["nodes"][1]["parent"] == 0


def test_bad_safety_specs_are_refused(stack):
    _, _, admin, _ = stack
    for spec, param in (
        ({"harness": "pi"}, "safety.workspace"),
        ({"workspace": "relative"}, "safety.workspace"),
        ({"workspace": "/w", "text_action": "("}, "safety.text_action"),
        ({"workspace": "/w", "text_action": "no group"}, "safety.text_action"),
        ({"workspace": "/w", "protected_paths": "tests/"}, "safety.protected_paths"),
        ({"workspace": "/w", "colour": "red"}, "safety.colour"),
    ):
        resp = admin.post("/admin/sessions", json={"purpose": "train", "safety": spec})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param, (spec, resp.text)


def test_streamed_blocks_in_the_other_dialects(stack):
    engine, proxy, admin, _ = stack

    engine.reset(
        [
            Reply(tool_calls=[("Bash", {"command": HACK})]),
            Reply(tool_calls=[("exec_command", {"cmd": HACK})]),
            Reply(tool_calls=[("bash", {"command": HACK})]),
        ]
    )
    # Anthropic Messages (claude-code's Bash tool).
    key = new_session(admin, safety=SAFETY)
    claude = anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0,
                                 http_client=anthropic.DefaultHttpxClient(trust_env=False))  # fmt: skip
    tool = {"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}
    with claude.messages.stream(model="m", max_tokens=64, messages=[USER], tools=[tool]) as stream:
        final = stream.get_final_message()
    (use,) = [b for b in final.content if b.type == "tool_use"]
    assert use.name == "Bash" and use.input["command"].startswith("printf ") and HACK not in use.input["command"]

    # OpenAI Responses (codex's exec_command).
    key = new_session(admin, safety={**SAFETY, "harness": "codex"})
    responses = chat(proxy, key).responses
    exec_tool = {"type": "function", "name": "exec_command", "parameters": {
        "type": "object", "properties": {"cmd": {"type": "string"}}}}  # fmt: skip
    events = list(responses.create(model="m", input="Make the tests pass.", tools=[exec_tool], stream=True))
    (done,) = [e for e in events if e.type == "response.completed"]
    (call,) = [item for item in done.response.output if item.type == "function_call"]
    assert call.name == "exec_command" and json.loads(call.arguments)["cmd"].startswith("printf ")

    # Google streamGenerateContent.
    key = new_session(admin, safety=SAFETY)
    client = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=proxy.url, api_version="v1beta"))
    declaration = types.FunctionDeclaration(
        name="bash", parameters_json_schema={"type": "object", "properties": {"command": {"type": "string"}}}
    )
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[declaration])])
    calls = [
        part.function_call
        for chunk in client.models.generate_content_stream(model="m", contents="Make the tests pass.", config=config)
        for part in (chunk.candidates[0].content.parts or [])
        if part.function_call
    ]
    assert [c.name for c in calls] == ["bash"] and calls[0].args["command"].startswith("printf ")


def test_hostile_tool_calls_follow_the_undecidable_default(stack, tmp_path):
    """Huge, invalid, binary or deeply nested arguments never break a reply; they are undecidable, which the
    default ("on") lets through and "strict" blocks."""
    from harness_rl.proxy.gatekeeper import SafetySpec
    from harness_rl.safety import SafetyConfig

    nested = "echo hi"
    for _ in range(10):  # past the gate's 8 levels of bash -c (each level doubles the escaping)
        nested = f"bash -c {json.dumps(nested)}"
    hostile = [
        '{"command": "' + "x" * 200_000 + '"}',
        "{not json",
        json.dumps({"command": "\x00\xff\ud800 binary"}),
        json.dumps({"command": nested}),
        "[" * 5000 + "]" * 5000,
    ]
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": a}} for i, a in enumerate(hostile)
    ]
    for mode, expect_blocked in (("allow", False), ("block", True)):
        gate = ProxyGate(SafetyGate(SafetyConfig(undecidable=mode))).for_session(SafetySpec(workspace="/work/ws"))
        reviewed = list(calls)
        blocks = gate.review_tool_calls(reviewed, [BASH])
        assert len(blocks) == (len(hostile) if expect_blocked else 0)
        assert all(b.rule == "undecidable" for b in blocks)
        assert (reviewed == calls) is not expect_blocked

    # Through the running proxy ("on"): a shell nested past the analysis depth passes, and the reply is whole.
    engine, proxy, admin, _ = stack
    engine.reset([Reply(tool_calls=[("bash", {"command": nested})])])
    key = new_session(admin, safety=SAFETY)
    message = chat(proxy, key).chat.completions.create(model="m", messages=[USER], tools=[BASH]).choices[0].message
    assert json.loads(message.tool_calls[0].function.arguments)["command"].startswith("bash -c")
    assert trace(admin, key)["failures"] == []
