"""The proxy serves Anthropic Messages (`/v1/messages`, `?beta=true`) to the real anthropic SDK and to
claude-code's captured requests, translating to and from the engine's chat completions."""

import json
import time
from pathlib import Path

import anthropic
import httpx
import pytest

from harness_rl.proxy.dialects.anthropic_messages import (
    AnthropicMessages,
    drop_betas,
    drop_billing_header,
    drop_context_management,
    drop_deferred_tools,
    drop_metadata,
    drop_output_config,
    drop_schemaless_tools,
    drop_thinking,
    drop_thinking_blocks,
    strip_cache_control,
    tool_arguments,
    tool_input,
)
from harness_rl.proxy.dialects.openai_chat import OpenAIChat
from harness_rl.proxy.server import ProxyServer, UvicornThread
from harness_rl.proxy.toy_chat_template import render_prompt
from harness_rl.testkit.fake_vllm import FakeEngine, Reply
from tests.proxy_helpers import new_session, trace

ADMIN = "admin-secret"
CAPTURES = Path(__file__).parents[1] / "fixtures" / "captures" / "claude-code"
BASH_TOOL = {
    "name": "bash",
    "description": "Execute a bash command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}
SYSTEM = "You are helpful."
MESSAGES = [{"role": "user", "content": "Say hello."}]
CHAT_MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def servers():
    engine = FakeEngine()
    with UvicornThread(engine.app) as engine_server:
        with ProxyServer(
            engine_server.url, ADMIN, base_model="base-model", dialects=[OpenAIChat(), AnthropicMessages()]
        ) as proxy:
            yield engine, proxy


@pytest.fixture
def stack(servers):
    """start(replies, **behaviour) -> (engine, proxy, admin client), with the engine's script reset."""
    engine, proxy = servers
    clients = []

    def start(replies=None, **behaviour):
        engine.reset(replies, **behaviour)
        admin = httpx.Client(base_url=proxy.url, headers={"Authorization": f"Bearer {ADMIN}"}, trust_env=False)
        clients.append(admin)
        return engine, proxy, admin

    yield start
    for client in clients:
        client.close()


def sdk(proxy, key):
    return anthropic.Anthropic(
        base_url=proxy.url, api_key=key, max_retries=0, http_client=anthropic.DefaultHttpxClient(trust_env=False)
    )


def parse_sse(text):
    """[(event, data)] from an SSE body."""
    events = []
    for raw in text.split("\n\n"):
        lines = [line for line in raw.splitlines() if line]
        if not lines:
            continue
        event = next(line[7:] for line in lines if line.startswith("event: "))
        data = json.loads(next(line[6:] for line in lines if line.startswith("data: ")))
        assert data["type"] == event
        events.append((event, data))
    return events


# ---------------------------------------------------------------------------------------------------------
# Drop rules and decoding (no server).


def test_drop_rules_remove_only_their_field():
    body = {
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": []},
        "output_config": {"effort": "high"},
        "metadata": {"user_id": "x"},
        "betas": ["a"],
        "max_tokens": 5,
    }
    for rule, name in [
        (drop_thinking, "thinking"),
        (drop_context_management, "context_management"),
        (drop_output_config, "output_config"),
        (drop_metadata, "metadata"),
        (drop_betas, "betas"),
    ]:
        assert rule(body) == [name] and name not in body
        assert rule(body) == []  # absent: nothing dropped
        assert rule.__doc__
    assert body == {"max_tokens": 5}


def test_strip_cache_control_at_any_depth():
    value = {
        "cache_control": {"type": "ephemeral"},
        "a": [{"type": "text", "text": "t", "cache_control": {"type": "ephemeral"}}, 3],
    }
    assert strip_cache_control(value) == {"a": [{"type": "text", "text": "t"}, 3]}


def test_tool_rules_and_billing_header_and_thinking_blocks():
    tools = [BASH_TOOL, {"name": "P", "input_schema": {}, "defer_loading": True}, {"type": "web_search_20250305"}]
    kept, dropped = drop_deferred_tools(tools)
    assert dropped == ["P"] and len(kept) == 2
    kept, dropped = drop_schemaless_tools(kept)
    assert kept == [BASH_TOOL] and dropped == ["web_search_20250305"]
    blocks = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1;"}, {"type": "text", "text": "S"}]
    assert drop_billing_header(blocks) == [{"type": "text", "text": "S"}]
    history = [{"type": "thinking", "thinking": "..", "signature": "s"}, {"type": "redacted_thinking", "data": ""}]
    assert drop_thinking_blocks(history + blocks[1:]) == blocks[1:]


def test_tool_input_round_trips_arguments():
    assert tool_input('{"a": "é"}') == {"a": "é"} and tool_arguments({"a": "é"}) == '{"a": "é"}'
    assert tool_input("") == {} and tool_input("[1]") == {"_raw_arguments": "[1]"}
    assert tool_arguments(tool_input("{not json")) == "{not json"


def test_decode_system_messages_tools_and_drops():
    body = {
        "model": "claude-x",
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2;"},
            {"type": "text", "text": "Sys A", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "u1"}, {"type": "text", "text": "u2"}]},
            {"role": "system", "content": [{"type": "text", "text": "Env", "cache_control": {"type": "ephemeral"}}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    {"type": "text", "text": "Running."},
                    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"command": "pwd"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt", "is_error": False},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "denied"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "go on"},
                ],
            },
        ],
        "tools": [BASH_TOOL, {"name": "Deferred", "input_schema": {"type": "object"}, "defer_loading": True}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "max_tokens": 100,
        "stop_sequences": ["END"],
        "thinking": {"type": "adaptive"},
        "metadata": {"user_id": "u"},
        "service_tier": "auto",
        "stream": True,
    }
    req = AnthropicMessages().decode_request(body, {})
    up = req.upstream_body
    assert req.stream is True and req.client_model == "claude-x"
    assert up["messages"] == [
        {"role": "system", "content": "Sys A\n\nEnv"},
        {"role": "user", "content": "u1\n\nu2"},
        {
            "role": "assistant",
            "content": "Running.",
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
                {"id": "toolu_2", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pwd"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: denied"},
        {"role": "user", "content": "go on"},
    ]
    assert up["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "parameters": BASH_TOOL["input_schema"],
                "description": BASH_TOOL["description"],
            },
        }
    ]
    assert up["tool_choice"] == "required" and up["parallel_tool_calls"] is False
    assert up["max_tokens"] == 100 and up["stop"] == ["END"]
    assert set(up) == {"messages", "tools", "tool_choice", "parallel_tool_calls", "max_tokens", "stop"}
    assert req.options["dropped_fields"] == ["thinking", "metadata", "tools.Deferred"]
    assert req.options["ignored_fields"] == ["service_tier"]


@pytest.mark.parametrize(
    "body, param",
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
        ({"messages": MESSAGES, "stream": "yes"}, "stream"),
        ({"messages": MESSAGES, "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": [{"type": "document"}]}]}, "messages[0].content[0:]"),
        # Found by tests/unit/test_proxy_fuzz.py: each of these was a 500 or reached the model as "None".
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": "x"}]}]}, "messages[0].content[0:][0]"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]}, "messages[0].content[0:][0]"),
        (
            {
                "messages": [
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}]}
                ]
            },
            "messages[0].content[0].input",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": float("nan")}, "temperature"),
    ],
)
def test_decode_rejects_bad_fields(body, param):
    from harness_rl.proxy.errors import ProxyError

    with pytest.raises(ProxyError) as info:
        AnthropicMessages().decode_request(body, {})
    assert info.value.status == 400 and info.value.param.startswith(param)


def _chunk(delta, finish=None, **extra):
    return {"id": "c1", "model": "base", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def test_stream_encoder_text_then_fragmented_and_bad_tool_arguments():
    dialect = AnthropicMessages()
    req = dialect.decode_request({"model": "cm", "messages": MESSAGES, "stream": True}, {})
    enc = dialect.stream_encoder(req)
    chunks = [
        _chunk({"role": "assistant", "content": ""}, prompt_token_ids=[1, 2, 3]),
        _chunk({"content": "Hi"}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "bash", "arguments": '{"comm'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'and": "ls"}'}}]}),
        _chunk({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "bash", "arguments": "{oops"}}]}),
        _chunk({}, "tool_calls"),
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}},
    ]
    out = b"".join(b"".join(enc.on_chunk(c)) for c in chunks) + b"".join(enc.on_end())
    events = parse_sse(out.decode())
    assert [e for e, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["usage"]["input_tokens"] == 3 and events[0][1]["message"]["model"] == "cm"
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "Hi"}
    assert events[4][1]["content_block"] == {"type": "tool_use", "id": "call_a", "name": "bash", "input": {}}
    assert json.loads(events[5][1]["delta"]["partial_json"]) == {"command": "ls"}
    assert json.loads(events[8][1]["delta"]["partial_json"]) == {"_raw_arguments": "{oops"}
    assert [d["index"] for _, d in events[1:10]] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert events[10][1]["delta"]["stop_reason"] == "tool_use"
    assert events[10][1]["usage"] == {"input_tokens": 3, "output_tokens": 9}


def test_encode_response_stop_reasons_and_errors():
    dialect = AnthropicMessages()
    req = dialect.decode_request({"messages": MESSAGES, "stop_sequences": ["##"]}, {})
    reply = {"id": "x", "model": "base", "choices": [{"message": {"content": "a"}, "finish_reason": "length"}]}
    assert dialect.encode_response(reply, req)["stop_reason"] == "max_tokens"
    reply["choices"][0].update(finish_reason="stop", stop_reason="##")
    out = dialect.encode_response(reply, req)
    assert out["stop_reason"] == "stop_sequence" and out["stop_sequence"] == "##" and out["model"] == "base"
    from harness_rl.proxy.errors import ProxyError

    assert dialect.error_body(ProxyError(400, "upstream_error", "too long"))["error"]["type"] == "invalid_request_error"
    assert dialect.error_body(ProxyError(502, "upstream_error", "down")) == {
        "type": "error",
        "error": {"type": "api_error", "message": "down"},
    }


# ---------------------------------------------------------------------------------------------------------
# Through the proxy with the anthropic SDK.


def test_text_reply_and_capture(stack):
    engine, proxy, admin = stack([Reply(text="hello world")])
    key = new_session(admin)
    reply = sdk(proxy, key).messages.create(
        model="claude-sonnet", system=SYSTEM, messages=MESSAGES, max_tokens=64, metadata={"user_id": "u"}
    )
    assert reply.type == "message" and reply.role == "assistant" and reply.model == "claude-sonnet"
    assert [b.type for b in reply.content] == ["text"] and reply.content[0].text == "hello world"
    assert reply.stop_reason == "end_turn" and reply.stop_sequence is None
    assert reply.usage.input_tokens == len(render_prompt(CHAT_MESSAGES))
    assert reply.usage.output_tokens == len("hello world") + 1
    sent = engine.requests[0]
    assert sent["messages"] == CHAT_MESSAGES and sent["max_tokens"] == 64 and "metadata" not in sent
    (node,) = trace(admin, key)["nodes"]
    assert node["dialect"] == "anthropic_messages" and node["prompt_token_ids"] == render_prompt(CHAT_MESSAGES)


def test_beta_route_and_bearer_auth(stack):
    engine, proxy, admin = stack([Reply(text="beta ok")])
    key = new_session(admin)
    client = anthropic.Anthropic(
        base_url=proxy.url, auth_token=key, max_retries=0, http_client=anthropic.DefaultHttpxClient(trust_env=False)
    )
    reply = client.beta.messages.create(model="m", messages=MESSAGES, max_tokens=16, betas=["context-1m-2025-08-07"])
    assert reply.content[0].text == "beta ok"


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_round_trip_links_nodes(stack, stream):
    engine, proxy, admin = stack(
        [Reply(text="Let me run it.", tool_calls=[("bash", {"command": "echo hello > out.txt"})]), Reply(text="Done.")]
    )
    key = new_session(admin)
    client = sdk(proxy, key)

    def call(messages):
        kwargs = dict(model="m", system=SYSTEM, messages=messages, tools=[BASH_TOOL], max_tokens=256)
        if not stream:
            return client.messages.create(**kwargs)
        with client.messages.stream(**kwargs) as s:
            return s.get_final_message()

    first = call(MESSAGES)
    assert first.stop_reason == "tool_use"
    text, tool_use = first.content
    assert text.type == "text" and text.text == "Let me run it."
    assert tool_use.type == "tool_use" and tool_use.name == "bash" and tool_use.id
    assert tool_use.input == {"command": "echo hello > out.txt"}
    followup = MESSAGES + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "(no output)"}]},
    ]
    second = call(followup)
    assert second.stop_reason == "end_turn" and second.content[0].text == "Done."
    assert engine.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": tool_use.id, "content": "(no output)"}

    t = trace(admin, key)
    n1, n2 = t["nodes"]
    assert n1["finish_reason"] == "tool_calls" and n2["parent"] == n1["id"]
    (seq,) = t["sequences"]
    assert seq["node_ids"] == [0, 1]


def test_streaming_is_incremental_and_well_formed(stack):
    engine, proxy, admin = stack([Reply(text="streamed!")], chunk_delay_s=0.05)
    key = new_session(admin)
    arrivals, text = [], ""
    start = time.monotonic()
    with sdk(proxy, key).messages.stream(model="m", system=SYSTEM, messages=MESSAGES, max_tokens=64) as s:
        for piece in s.text_stream:
            arrivals.append(time.monotonic() - start)
            text += piece
        final = s.get_final_message()
    assert text == "streamed!" and final.content[0].text == "streamed!"
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == len("streamed!") + 1
    assert final.usage.input_tokens == len(render_prompt(CHAT_MESSAGES))
    assert arrivals[-1] - arrivals[0] > 0.2  # 10 chunks 50 ms apart, relayed as they come

    raw = sdk(proxy, key).messages.create(model="m", messages=MESSAGES, max_tokens=8, stream=True)
    types = [event.type for event in raw]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert types[1] == "content_block_start" and "content_block_stop" in types


def test_unknown_key_is_authentication_error(stack):
    engine, proxy, admin = stack()
    with pytest.raises(anthropic.AuthenticationError) as info:
        sdk(proxy, "not-a-session").messages.create(model="m", messages=MESSAGES, max_tokens=8)
    assert info.value.status_code == 401
    assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "authentication_error"
    key = new_session(admin)
    with pytest.raises(anthropic.BadRequestError) as bad:
        sdk(proxy, key).messages.create(model="m", messages=[], max_tokens=8)
    assert bad.value.body["error"]["type"] == "invalid_request_error"


def test_mid_stream_failure_is_an_error_event(stack):
    engine, proxy, admin = stack([Reply(text="partial reply")], fail_after_chunks=4)
    key = new_session(admin)
    with pytest.raises(anthropic.APIStatusError):
        with sdk(proxy, key).messages.stream(model="m", messages=MESSAGES, max_tokens=64) as s:
            for _ in s:
                pass
    assert trace(admin, key)["failures"]


def test_budget_exhausted_stream_is_plain_text(stack):
    engine, proxy, admin = stack()
    key = new_session(admin, max_requests=1)
    client = sdk(proxy, key)
    client.messages.create(model="m", messages=MESSAGES, max_tokens=8)
    with client.messages.stream(model="m", messages=MESSAGES, max_tokens=8) as s:
        final = s.get_final_message()
    assert final.stop_reason == "end_turn" and "budget" in final.content[0].text.lower()
    assert len(engine.requests) == 1


# ---------------------------------------------------------------------------------------------------------
# claude-code's captured requests, replayed as sent.


def _replay(proxy, key, body):
    resp = httpx.post(
        proxy.url + "/v1/messages?beta=true",
        json=body,
        headers={"x-api-key": key, "anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219"},
        trust_env=False,
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/event-stream")
    return parse_sse(resp.text)


def test_claude_code_captured_requests_replay(stack):
    engine, proxy, admin = stack(
        [Reply(tool_calls=[("Bash", {"command": "echo hello > out.txt"})]), Reply(text="Done.")]
    )
    key = new_session(admin)
    first = json.loads((CAPTURES / "request.json").read_text())["body"]
    followup = json.loads((CAPTURES / "request_followup.json").read_text())["body"]
    followup["tools"] = json.loads((CAPTURES / "tools.json").read_text())  # stored as "<12 tools, same ...>"

    events = _replay(proxy, key, first)
    kinds = [e for e, _ in events]
    assert kinds == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[1][1]["content_block"]
    assert start["type"] == "tool_use" and start["name"] == "Bash" and start["input"] == {}
    assert json.loads(events[2][1]["delta"]["partial_json"]) == {"command": "echo hello > out.txt"}
    assert events[4][1]["delta"]["stop_reason"] == "tool_use" and events[4][1]["usage"]["output_tokens"] > 0
    assert events[0][1]["message"]["model"] == "fake-model"

    sent = engine.requests[0]
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user"]
    system = sent["messages"][0]["content"]
    assert system.startswith("You are a Claude agent") and "# Environment" in system
    assert "x-anthropic-billing-header" not in system
    assert len(sent["tools"]) == 11 and "DeferredToolPlaceholder" not in {t["function"]["name"] for t in sent["tools"]}
    text = json.dumps(sent)
    for name in ("cache_control", "thinking", "context_management", "output_config", "metadata", "defer_loading"):
        assert name not in text, name
    assert sent["max_tokens"] == 32000 and sent["stream"] is True

    events = _replay(proxy, key, followup)
    deltas = [d["delta"]["text"] for e, d in events if e == "content_block_delta"]
    assert "".join(deltas) == "Done." and events[-2][1]["delta"]["stop_reason"] == "end_turn"
    sent = engine.requests[1]
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "toolu_0002",
        "content": "(Bash completed with no output)",
    }
    assert sent["messages"][2]["tool_calls"][0]["function"] == {
        "name": "Bash",
        "arguments": '{"command": "echo hello > out.txt"}',
    }
    assert len(trace(admin, key)["nodes"]) == 2
