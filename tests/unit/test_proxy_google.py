"""The proxy serves Google generateContent to the real google-genai SDK (streaming and not, function calls
both ways) and to raw `?alt=sse&key=` requests, normalizing to the engine's chat completions."""

import json
import time

import httpx
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from harness_rl.proxy.dialects.google_generate import GoogleGenerateContent, normalize_schema
from harness_rl.proxy.dialects.openai_chat import OpenAIChat
from harness_rl.proxy.errors import ProxyError
from harness_rl.proxy.server import ProxyServer, UvicornThread
from harness_rl.proxy.toy_chat_template import END, render_prompt, tokenize_text
from harness_rl.testkit.fake_vllm import FakeEngine, Reply
from tests.proxy_helpers import trace

ADMIN = "admin-secret"
BASH_DECL = {
    "name": "bash",
    "description": "Execute a bash command",
    "parameters": {
        "type": "OBJECT",
        "properties": {"command": {"type": "STRING", "description": "the command"}},
        "required": ["command"],
    },
}
SYSTEM = "You are helpful."


@pytest.fixture(scope="module")
def servers():
    engine = FakeEngine()
    with UvicornThread(engine.app) as engine_server:
        dialects = [OpenAIChat(), GoogleGenerateContent()]
        with ProxyServer(engine_server.url, ADMIN, base_model="base-model", dialects=dialects) as proxy:
            with httpx.Client(
                base_url=proxy.url, headers={"Authorization": f"Bearer {ADMIN}"}, trust_env=False
            ) as admin:
                yield engine, proxy, admin


@pytest.fixture
def stack(servers):
    """start(replies, **behaviour) -> (engine, proxy, admin, session key); the engine's script is reset."""
    engine, proxy, admin = servers

    def start(replies=None, **behaviour):
        engine.reset(replies, **behaviour)
        resp = admin.post("/admin/sessions", json={"adapter": None, "purpose": "train", "max_requests": 10})
        assert resp.status_code == 201, resp.text
        return engine, proxy, admin, resp.json()["key"]

    return start


def client(proxy, key, version="v1"):
    options = types.HttpOptions(base_url=proxy.url, api_version=version)
    return genai.Client(api_key=key, http_options=options)


def test_text_reply_and_request_normalization(stack):
    engine, proxy, admin, key = stack([Reply(text="hello world")])
    config = types.GenerateContentConfig(
        system_instruction=SYSTEM,
        max_output_tokens=64,
        temperature=0.3,
        top_p=0.5,
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(**BASH_DECL)])],
    )
    sdk = client(proxy, key)  # keep a reference: the SDK closes its HTTP client when collected
    reply = sdk.models.generate_content(model="gemini-x", contents="Say hello.", config=config)
    assert reply.text == "hello world"
    assert reply.candidates[0].finish_reason == types.FinishReason.STOP
    assert reply.model_version == "gemini-x"
    usage = reply.usage_metadata
    assert usage.candidates_token_count == len("hello world") + 1
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count

    sent = engine.requests[0]
    assert sent["messages"] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hello."}]
    assert sent["max_tokens"] == 64 and sent["temperature"] == 0.3 and sent["top_p"] == 1.0  # train policy
    (tool,) = sent["tools"]
    assert tool["function"]["parameters"] == {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "the command"}},
        "required": ["command"],
    }
    (node,) = trace(admin, key)["nodes"]
    assert node["dialect"] == "google_generate" and node["prompt_token_ids"] == render_prompt(sent["messages"])
    assert node["completion_token_ids"] == tokenize_text("hello world") + [END]


@pytest.mark.parametrize("stream", [False, True])
def test_function_call_round_trip_links_nodes(stack, stream):
    engine, proxy, admin, key = stack(
        [Reply(tool_calls=[("bash", {"command": "echo hi > out.txt"})]), Reply(text="Done.")]
    )
    sdk = client(proxy, key)
    config = types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(**BASH_DECL)])],
    )

    def call(contents):
        if not stream:
            return sdk.models.generate_content(model="gemini-x", contents=contents, config=config)
        parts, finish = [], None
        for chunk in sdk.models.generate_content_stream(model="gemini-x", contents=contents, config=config):
            candidate = chunk.candidates[0]
            parts += (candidate.content and candidate.content.parts) or []
            finish = candidate.finish_reason or finish
        return types.GenerateContentResponse(
            candidates=[types.Candidate(content=types.Content(role="model", parts=parts), finish_reason=finish)]
        )

    user = types.Content(role="user", parts=[types.Part(text="Write out.txt.")])
    first = call([user])
    (fc,) = first.function_calls
    assert fc.name == "bash" and fc.args == {"command": "echo hi > out.txt"}
    assert first.candidates[0].finish_reason == types.FinishReason.STOP
    # Like gemini-cli's history: the model turn as received (minus the id, which Google may omit), then the
    # function response.
    model_turn = types.Content(
        role="model", parts=[types.Part(function_call=types.FunctionCall(name=fc.name, args=fc.args))]
    )
    answer = types.Content(
        role="user",
        parts=[types.Part(function_response=types.FunctionResponse(name="bash", response={"output": "(no output)"}))],
    )
    second = call([user, model_turn, answer])
    assert "".join(p.text or "" for p in second.candidates[0].content.parts) == "Done."

    sent = engine.requests[1]["messages"]
    assert sent[2]["role"] == "assistant" and sent[2]["tool_calls"][0]["id"] == "call_1_0"
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1_0", "content": "(no output)"}
    t = trace(admin, key)
    n1, n2 = t["nodes"]
    assert n1["finish_reason"] == "tool_calls" and n1["tool_calls"][0]["function"]["name"] == "bash"
    assert n2["parent"] == n1["id"]
    (seq,) = t["sequences"]
    assert seq["node_ids"] == [0, 1]


def test_streaming_is_incremental(stack):
    engine, proxy, admin, key = stack([Reply(text="streamed!")], chunk_delay_s=0.05)
    start = time.monotonic()
    arrivals, text, last = [], "", None
    sdk = client(proxy, key, version="v1beta")
    for chunk in sdk.models.generate_content_stream(model="gemini-x", contents="Go."):
        if chunk.text:
            arrivals.append(time.monotonic() - start)
            text += chunk.text
        last = chunk
    assert text == "streamed!"
    assert arrivals[-1] - arrivals[0] > 0.2  # 10 engine chunks 50 ms apart, relayed as they come
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata.candidates_token_count == len("streamed!") + 1
    (node,) = trace(admin, key)["nodes"]
    assert node["completion_token_ids"] == tokenize_text("streamed!") + [END]


def test_unknown_key_is_401_in_google_shape(stack):
    engine, proxy, admin, key = stack()
    sdk = client(proxy, "not-a-session")
    with pytest.raises(genai_errors.ClientError) as info:
        sdk.models.generate_content(model="gemini-x", contents="hi")
    assert info.value.code == 401 and info.value.status == "UNAUTHENTICATED"
    resp = httpx.post(proxy.url + "/v1beta/models/x:generateContent", json={"contents": []}, trust_env=False)
    assert resp.status_code == 401 and resp.json()["error"]["status"] == "UNAUTHENTICATED"
    headers = {"x-goog-api-key": key}
    resp = httpx.post(proxy.url + "/v1beta/models/x:countTokens", json={}, headers=headers, trust_env=False)
    assert resp.status_code == 404 and resp.json()["error"]["status"] == "NOT_FOUND"
    resp = httpx.post(proxy.url + "/v1beta/models/x:generateContent", json={}, headers=headers, trust_env=False)
    assert resp.status_code == 400 and resp.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert engine.requests == []


def test_raw_sse_request_with_key_query(stack):
    engine, proxy, admin, key = stack([Reply(text="hi", tool_calls=[("bash", {"command": "ls"})])])
    body = {
        "contents": [{"role": "user", "parts": [{"text": "List files."}]}],
        "tools": [{"functionDeclarations": [BASH_DECL]}],
        "generationConfig": {"maxOutputTokens": 100},
    }
    url = proxy.url + f"/v1beta/models/x:streamGenerateContent?alt=sse&key={key}"
    with httpx.stream("POST", url, json=body, trust_env=False) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[5:]) for line in resp.iter_lines() if line.startswith("data:")]
    text = "".join(p.get("text", "") for e in events for p in e["candidates"][0].get("content", {}).get("parts", []))
    assert text == "hi"
    last = events[-1]
    assert last["candidates"][0]["finishReason"] == "STOP" and last["modelVersion"] == "x"
    assert last["candidates"][0]["content"]["parts"][0]["functionCall"]["args"] == {"command": "ls"}
    assert last["usageMetadata"]["totalTokenCount"] > 0
    assert all("finishReason" not in e["candidates"][0] for e in events[:-1])
    assert engine.requests[0]["max_tokens"] == 100
    assert len(trace(admin, key)["nodes"]) == 1


def test_pairing_by_id_and_name_and_schema_normalization():
    dialect = GoogleGenerateContent()
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "ok"},
                    {"functionCall": {"name": "a", "args": {}}},
                    {"functionCall": {"name": "b", "args": {"x": 1}, "id": "given"}, "thoughtSignature": "c2ln"},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "b", "response": {"r": 2}}},
                    {"functionResponse": {"name": "a", "response": {"output": "A"}}},
                    {"text": "and?"},
                ],
            },
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["a"]}},
        "tools": [{"functionDeclarations": [{"name": "a"}]}, {"googleSearch": {}}],
    }
    req = dialect.decode_request(body, {"version": "v1beta", "model_action": "m:streamGenerateContent"})
    assert req.stream is True and req.client_model == "m"
    messages = req.upstream_body["messages"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_1_0", "given"]
    assert messages[2] == {"role": "tool", "tool_call_id": "given", "content": '{"r": 2}'}
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1_0", "content": "A"}
    assert messages[4] == {"role": "user", "content": "and?"}
    assert req.upstream_body["tool_choice"] == {"type": "function", "function": {"name": "a"}}
    assert len(req.upstream_body["tools"]) == 1
    image = {"contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": ""}}]}]}
    with pytest.raises(ProxyError) as info:
        dialect.decode_request(image, {"model_action": "m:generateContent"})
    assert info.value.status == 400 and "inlineData" in info.value.message
    schema = {"type": "ARRAY", "nullable": True, "items": {"type": "INTEGER"}, "minItems": "1"}
    assert normalize_schema(schema) == {"type": ["array", "null"], "items": {"type": "integer"}, "minItems": 1}


def test_mid_stream_failure_raises_sdk_error_and_budget_reply(stack):
    engine, proxy, admin, key = stack([Reply(text="partial reply")], fail_after_chunks=4)
    sdk = client(proxy, key)
    received = ""
    with pytest.raises(genai_errors.APIError) as info:
        for chunk in sdk.models.generate_content_stream(model="gemini-x", contents="Go."):
            received += chunk.text or ""
    assert info.value.code == 502 and received == "par"
    assert [f["kind"] for f in trace(admin, key)["failures"]] == ["upstream_stream_error"]

    resp = admin.post("/admin/sessions", json={"adapter": None, "purpose": "train", "max_requests": 0})
    sdk = client(proxy, resp.json()["key"])
    assert "budget exhausted" in sdk.models.generate_content(model="gemini-x", contents="hi").text.lower()
    chunks = list(sdk.models.generate_content_stream(model="gemini-x", contents="hi"))
    assert "budget exhausted" in "".join(c.text or "" for c in chunks).lower()
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"functionDeclarations": 5}]}, "tools[0].functionDeclarations"),
        ({"tools": [{"functionDeclarations": [{"name": "f", "parameters": "x"}]}]}, "tools[0]"),
        ({"generationConfig": {"maxOutputTokens": "64"}}, "generationConfig.maxOutputTokens"),
        ({"generationConfig": {"temperature": [1]}}, "generationConfig.temperature"),
        ({"generationConfig": {"stopSequences": "END"}}, "generationConfig.stopSequences"),
        ({"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": [1]}}]}]}, "contents[0]"),
        ({"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "id": 7}}]}]}, "contents[0]"),
        ({"contents": [{"parts": [{"text": 5}]}]}, "contents[0].parts[0].text"),
    ],
)
def test_decode_rejects_bad_fields(body, param):
    """Found by tests/unit/test_proxy_fuzz.py: each of these was a 500, or reached the engine unchecked."""
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], **body}
    with pytest.raises(ProxyError) as info:
        GoogleGenerateContent().decode_request(body, {"model_action": "m:generateContent"})
    assert info.value.status == 400 and info.value.param.startswith(param)


def test_decode_null_text_is_empty_and_odd_digits_stay_strings():
    body = {
        "systemInstruction": {"parts": [{"text": None}, {"text": "Be brief."}]},
        "contents": [{"parts": [{"text": None}]}],
        "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "STRING", "maxLength": "²"}}]}],
    }
    req = GoogleGenerateContent().decode_request(body, {"model_action": "m:generateContent"})
    assert req.upstream_body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": ""},
    ]
    assert req.upstream_body["tools"][0]["function"]["parameters"] == {"type": "string", "maxLength": "²"}
