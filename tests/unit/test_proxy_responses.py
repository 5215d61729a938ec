"""The proxy serves OpenAI Responses (codex's dialect) to the real openai SDK: text and tool-call replies,
streaming with the full event sequence, errors, and the real captured codex requests."""

import copy
import json
import time
from pathlib import Path

import httpx
import openai
import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from harness_rl.proxy.dialects.openai_chat import OpenAIChat
from harness_rl.proxy.dialects.openai_responses import OpenAIResponses
from harness_rl.proxy.errors import ProxyError
from harness_rl.proxy.server import ProxyServer, UvicornThread
from harness_rl.proxy.toy_chat_template import render_prompt
from harness_rl.testkit.fake_vllm import FakeEngine, Reply
from tests.proxy_helpers import new_session, trace

ADMIN = "admin-secret"
CAPTURES = Path(__file__).parents[1] / "fixtures" / "captures" / "codex"
BASH_TOOL = {
    "type": "function",
    "name": "bash",
    "description": "Execute a bash command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    "strict": False,
}
STREAM_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)


@pytest.fixture(scope="module")
def servers():
    engine = FakeEngine()
    with UvicornThread(engine.app) as engine_server:
        dialects = [OpenAIChat(), OpenAIResponses()]
        with ProxyServer(engine_server.url, ADMIN, base_model="base-model", dialects=dialects) as proxy:
            admin = httpx.Client(base_url=proxy.url, headers={"Authorization": f"Bearer {ADMIN}"}, trust_env=False)
            yield engine, proxy, admin
            admin.close()


@pytest.fixture
def stack(servers):
    """start(replies, **behaviour) -> (engine, proxy, admin) with the engine's script reset."""
    engine, proxy, admin = servers

    def start(replies=None, **behaviour):
        engine.reset(replies, **behaviour)
        return engine, proxy, admin

    return start


def sdk(proxy, key):
    return openai.OpenAI(
        base_url=proxy.url + "/v1", api_key=key, max_retries=0, http_client=httpx.Client(trust_env=False)
    )


def sse_events(text):
    """(event name, data) pairs of an SSE body."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines.get("event"), json.loads(lines["data"])))
    return out


def check_event_sequence(events):
    """Every event parses as an SDK stream event, names its type, and numbers are consecutive."""
    types = []
    for i, (name, data) in enumerate(events):
        assert name == data["type"] and data["sequence_number"] == i
        STREAM_EVENT.validate_python(data)
        types.append(name)
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    return types


def test_non_streaming_text_reply(stack):
    engine, proxy, admin = stack([Reply(text="hello world")])
    key = new_session(admin)
    raw = sdk(proxy, key).responses.with_raw_response.create(
        model="gpt-x", instructions="You are helpful.", input="Say hello.", max_output_tokens=64
    )
    reply = raw.parse()
    Response.model_validate(json.loads(raw.text))  # well-formed, not just tolerated by the SDK
    assert reply.output_text == "hello world" and reply.status == "completed" and reply.model == "gpt-x"
    assert reply.output[0].type == "message" and reply.output[0].role == "assistant"
    messages = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Say hello."}]
    sent = engine.requests[0]
    assert sent["messages"] == messages and sent["max_tokens"] == 64 and "tools" not in sent
    assert reply.usage.input_tokens == len(render_prompt(messages))
    assert reply.usage.output_tokens == len("hello world") + 1
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    (node,) = trace(admin, key)["nodes"]
    assert node["dialect"] == "openai_responses" and node["prompt_token_ids"] == render_prompt(messages)


@pytest.mark.parametrize("stream", [False, True])
def test_two_turn_function_call_round_trip_links_nodes(stack, stream):
    engine, proxy, admin = stack([Reply(tool_calls=[("bash", {"command": "echo hello"})]), Reply(text="Done.")])
    key = new_session(admin)
    client = sdk(proxy, key)
    tools = [BASH_TOOL, {"type": "web_search"}]

    def call(items):
        kwargs = dict(model="m", instructions="Be brief.", input=items, tools=tools)
        if not stream:
            return client.responses.create(**kwargs).output
        done = None
        with client.responses.stream(**kwargs) as events:
            for event in events:
                if event.type == "response.completed":
                    done = event.response
        return done.output

    first_input = [{"role": "user", "content": [{"type": "input_text", "text": "Make out.txt"}]}]
    output = call(first_input)
    (fc,) = [item for item in output if item.type == "function_call"]
    assert fc.name == "bash" and json.loads(fc.arguments) == {"command": "echo hello"} and fc.call_id
    followup = first_input + [
        fc.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": fc.call_id, "output": "(no output)"},
    ]
    output2 = call(followup)
    assert [item.type for item in output2] == ["message"] and output2[0].content[0].text == "Done."

    sent = engine.requests[1]
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent["messages"][2]["tool_calls"][0]["id"] == fc.call_id
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": fc.call_id, "content": "(no output)"}
    assert [t["function"]["name"] for t in sent["tools"]] == ["bash"]  # web_search dropped
    t = trace(admin, key)
    first, second = t["nodes"]
    assert first["finish_reason"] == "tool_calls" and second["parent"] == first["id"]
    assert [s["node_ids"] for s in t["sequences"]] == [[0, 1]]


def test_streaming_events_and_incremental_text(stack):
    engine, proxy, admin = stack([Reply(text="streamed!")], chunk_delay_s=0.05)
    key = new_session(admin)
    start = time.monotonic()
    arrivals, text, types, usage = [], "", [], None
    for event in sdk(proxy, key).responses.create(model="m", input="hi", stream=True):
        types.append(event.type)
        if event.type == "response.output_text.delta":
            arrivals.append(time.monotonic() - start)
            text += event.delta
        if event.type == "response.completed":
            usage = event.response.usage
            assert event.response.output_text == "streamed!"
    assert text == "streamed!" and usage.output_tokens == len("streamed!") + 1
    assert arrivals[-1] - arrivals[0] > 0.2  # relayed while the engine generates
    assert types[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert types[-5:] == [
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_streaming_tool_call_event_sequence(stack):
    engine, proxy, admin = stack([Reply(text="Running.", tool_calls=[("bash", {"command": "ls"})])])
    key = new_session(admin)
    body = {"model": "m", "input": "list files", "tools": [BASH_TOOL], "stream": True}
    resp = httpx.post(
        proxy.url + "/v1/responses", json=body, headers={"Authorization": f"Bearer {key}"}, trust_env=False
    )
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = sse_events(resp.text)
    types = check_event_sequence(events)
    assert types[-5:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    assert json.loads(final["output"][1]["arguments"]) == {"command": "ls"}
    assert final["usage"]["total_tokens"] == final["usage"]["input_tokens"] + final["usage"]["output_tokens"]


def test_unknown_key_and_bad_request(stack):
    engine, proxy, admin = stack()
    with pytest.raises(openai.AuthenticationError) as info:
        sdk(proxy, "not-a-session").responses.create(model="m", input="hi")
    assert info.value.status_code == 401 and info.value.code == "invalid_api_key"
    key = new_session(admin)
    with pytest.raises(openai.BadRequestError) as info:
        sdk(proxy, key).responses.create(model="m", input="hi", previous_response_id="resp_1")
    assert info.value.body["param"] == "previous_response_id"
    headers = {"Authorization": f"Bearer {key}"}
    resp = httpx.post(proxy.url + "/v1/responses", json={"input": []}, headers=headers, trust_env=False)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "input"


def test_budget_exhaustion_streams_plain_text(stack):
    engine, proxy, admin = stack([Reply(text="first")])
    key = new_session(admin, max_requests=1)
    client = sdk(proxy, key)
    client.responses.create(model="m", input="hi")
    events = list(client.responses.create(model="m", input="again", stream=True))
    assert "budget exhausted" in events[-1].response.output_text.lower() and len(engine.requests) == 1


def test_mid_stream_failure_sends_response_failed(stack):
    engine, proxy, admin = stack([Reply(text="partial reply")], fail_after_chunks=4)
    key = new_session(admin)
    events = list(sdk(proxy, key).responses.create(model="m", input="hi", stream=True))
    assert events[-1].type == "response.failed" and events[-1].response.error.code == "server_error"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "par"
    assert [f["kind"] for f in trace(admin, key)["failures"]] == ["upstream_stream_error"]


def test_captured_codex_requests_replay(stack):
    first = json.loads((CAPTURES / "request.json").read_text())
    followup = json.loads((CAPTURES / "request_followup.json").read_text())
    followup_body = copy.deepcopy(followup["body"])
    followup_body["tools"] = first["body"]["tools"]  # the capture abbreviates them
    engine, proxy, admin = stack([Reply(tool_calls=[("exec_command", {"cmd": "echo hello > out.txt"})])])
    key = new_session(admin)
    headers = {k: v for k, v in first["headers"].items() if k not in ("host", "content-length", "accept-encoding")}
    headers["authorization"] = f"Bearer {key}"
    with httpx.Client(base_url=proxy.url, headers=headers, trust_env=False) as client:
        resp = client.post(first["path"], json=first["body"])
        assert resp.status_code == 200, resp.text
        events = sse_events(resp.text)
        check_event_sequence(events)
        (call,) = events[-1][1]["response"]["output"]
        assert call["type"] == "function_call" and call["name"] == "exec_command"
        resp2 = client.post(followup["path"], json=followup_body)
        assert resp2.status_code == 200, resp2.text
        events2 = sse_events(resp2.text)
        types = check_event_sequence(events2)
        assert "response.output_text.delta" in types
        assert events2[-1][1]["response"]["output"][0]["content"][0]["text"] == "ok"

    sent, sent2 = engine.requests
    assert [m["role"] for m in sent["messages"]] == ["system", "system", "user", "user"]
    assert sent["messages"][1]["content"].startswith("<skills_instructions>")
    assert "<permissions instructions>" in sent["messages"][1]["content"]  # both parts kept
    assert [t["function"]["name"] for t in sent["tools"]] == [
        "exec_command",
        "write_stdin",
        "request_user_input",
        "view_image",
    ]
    assert sent["tool_choice"] == "auto" and sent["parallel_tool_calls"] is True
    assert not {"reasoning", "include", "store", "client_metadata", "prompt_cache_key", "input"} & set(sent)
    roles = [m["role"] for m in sent2["messages"]]
    assert roles == ["system", "system", "user", "user", "assistant", "tool"]
    assert sent2["messages"][4]["tool_calls"][0]["id"] == "call_0002"
    assert sent2["messages"][5]["tool_call_id"] == "call_0002"
    assert trace(admin, key)["failures"] == []


def test_codec_reasoning_items_and_truncation():
    """Pure codec: reasoning deltas become a reasoning item before the message; length -> incomplete."""
    dialect = OpenAIResponses()
    req = dialect.decode_request(
        {
            "input": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A"}]},
                {"type": "reasoning", "id": "rs_2", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "x"}]},
            ],
            "stream": True,
        },
        {},
    )
    (assistant, tool) = req.upstream_body["messages"]
    assert assistant["content"] == "A" and [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert tool == {"role": "tool", "tool_call_id": "c1", "content": "x"}
    encoder = dialect.stream_encoder(req)
    base = {"id": "x", "created": 1, "model": "m"}
    deltas = [({"reasoning": "think"}, None), ({"content": "Hi"}, None), ({}, "length")]
    events = []
    for delta, finish in deltas:
        events += encoder.on_chunk({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    events += encoder.on_end()
    parsed = sse_events(b"".join(events).decode())
    types = check_event_sequence(parsed)
    assert "response.reasoning_text.delta" in types
    final = parsed[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}


@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", "hot"), ("top_p", [1]), ("metadata", {"n": 1}), ("tool_choice", {"type": "function", "name": {}})],
)
def test_codec_refuses_fields_it_would_forward_or_echo_broken(field, value):
    """Found by tests/unit/test_proxy_fuzz.py: these reached the engine as is, or made a `response` the openai
    SDK cannot parse (or, for an unhashable function name, a 500)."""
    with pytest.raises(ProxyError) as info:
        OpenAIResponses().decode_request({"input": "hi", "tools": [BASH_TOOL], field: value}, {})
    assert info.value.status == 400 and info.value.param == field


def test_codec_echoes_the_tool_choice_the_engine_got():
    """A hosted-tool or unknown tool_choice object leaves the engine on "auto", and the response says so."""
    dialect = OpenAIResponses()
    for choice, echoed in [({"type": "web_search_preview"}, "auto"), ({}, "auto"), ("required", "required")]:
        req = dialect.decode_request({"input": "hi", "tools": [BASH_TOOL], "tool_choice": choice}, {})
        body = dialect.encode_response({"choices": [{"message": {"content": "x"}}]}, req)
        assert Response.model_validate(body).tool_choice == echoed
