"""The proxy serves OpenAI Chat Completions to the real openai SDK (streaming and not, tool calls both
ways), records the engine's token ids and log-probs, and applies keys, budgets, policy and errors."""

import json
import time

import httpx
import openai
import pytest

from harness_rl.proxy.server import ProxyServer, UvicornThread
from harness_rl.proxy.toy_chat_template import END, render_prompt, tokenize_text
from harness_rl.testkit.fake_vllm import FakeEngine, Reply, token_logprob
from tests.proxy_helpers import trace

ADMIN = "admin-secret"
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
MESSAGES = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def servers():
    """One fake engine and one proxy for the module (starting and stopping uvicorn costs ~0.4 s each)."""
    engine = FakeEngine()
    with UvicornThread(engine.app) as engine_server:
        with ProxyServer(engine_server.url, ADMIN, base_model="base-model") as proxy:
            yield engine, proxy


@pytest.fixture
def stack(servers):
    """start(engine, engine_url=None) -> (proxy, admin httpx client); the engine's script is reset."""
    engine_singleton, proxy = servers
    clients, extra = [], []

    def start(engine: FakeEngine, engine_url: str | None = None):
        target = proxy
        if engine_url is not None:
            target = ProxyServer(engine_url, ADMIN, base_model="base-model").start()
            extra.append(target)
        else:
            engine_singleton.reset(
                engine.replies,
                chunk_delay_s=engine.chunk_delay_s,
                omit_token_ids=engine.omit_token_ids,
                fail_after_chunks=engine.fail_after_chunks,
                status=engine.status,
            )
            engine.requests = engine_singleton.requests  # the test reads what the engine received
        admin = httpx.Client(base_url=target.url, headers={"Authorization": f"Bearer {ADMIN}"}, trust_env=False)
        clients.append(admin)
        return target, admin

    yield start
    for client in clients:
        client.close()
    for server in extra:
        server.stop()


def new_session(admin, **spec):
    body = {"adapter": None, "purpose": "train", "max_requests": 10, **spec}
    resp = admin.post("/admin/sessions", json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()["key"]


def sdk(proxy, key):
    return openai.OpenAI(
        base_url=proxy.url + "/v1", api_key=key, max_retries=0, http_client=httpx.Client(trust_env=False)
    )


def expected_completion(text):
    ids = tokenize_text(text) + [END]
    return ids, [token_logprob(i, t) for i, t in enumerate(ids)]


def test_non_streaming_reply_and_capture(stack):
    engine = FakeEngine([Reply(text="hello world")])
    proxy, admin = stack(engine)
    key = new_session(admin, sampling={"temperature": 0.5, "max_tokens": 64, "top_p": 0.9})
    raw = sdk(proxy, key).chat.completions.with_raw_response.create(
        model="anything",
        messages=MESSAGES,
        top_p=0.5,
        presence_penalty=0.5,
        max_completion_tokens=4096,
        extra_body={"top_k": 5, "min_p": 0},
    )
    reply = raw.parse()
    assert reply.choices[0].message.content == "hello world"
    assert reply.model == "anything"
    client_json = json.loads(raw.text)
    assert "prompt_token_ids" not in client_json and "token_ids" not in client_json["choices"][0]
    assert "logprobs" not in client_json["choices"][0]

    sent = engine.requests[0]
    assert sent["model"] == "base-model" and sent["return_token_ids"] is True and sent["logprobs"] is True
    assert sent["top_p"] == 1.0 and sent["temperature"] == 0.5 and sent["max_tokens"] == 64
    assert not {"top_k", "min_p", "presence_penalty", "max_completion_tokens"} & set(sent)

    t = trace(admin, key)
    assert t["requests"] == 1 and t["failures"] == [] and t["purpose"] == "train"
    (node,) = t["nodes"]
    ids, logprobs = expected_completion("hello world")
    assert node["prompt_token_ids"] == render_prompt(MESSAGES)
    assert node["completion_token_ids"] == ids
    assert node["completion_logprobs"] == pytest.approx(logprobs)
    assert node["dropped_params"] == ["presence_penalty", "top_k"]  # min_p=0 changes nothing
    assert node["finish_reason"] == "stop" and node["model"] == "base-model" and node["dialect"] == "openai_chat"
    assert node["usage"]["completion_tokens"] == len(ids) and node["budget_exhausted"] is False
    (seq,) = t["sequences"]
    assert seq["input_ids"] == node["prompt_token_ids"] + ids
    assert sum(seq["loss_mask"]) == len(ids)


def test_streaming_relays_incrementally_and_captures(stack):
    engine = FakeEngine([Reply(text="streamed!")], chunk_delay_s=0.05)
    proxy, admin = stack(engine)
    key = new_session(admin, adapter="pi-v3", purpose="eval")
    stream = sdk(proxy, key).chat.completions.create(
        model="m",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"top_k": 3},
    )
    start = time.monotonic()
    arrivals, text, usage = [], "", None
    for chunk in stream:
        assert "token_ids" not in (chunk.model_extra or {}) and "prompt_token_ids" not in (chunk.model_extra or {})
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic() - start)
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    assert text == "streamed!"
    assert usage is not None and usage.completion_tokens == len("streamed!") + 1
    # Text arrives while the engine is still generating (10 chunks 50 ms apart), not all at the end.
    assert arrivals[-1] - arrivals[0] > 0.2

    sent = engine.requests[0]
    assert sent["model"] == "pi-v3" and sent["top_k"] == 3 and "top_p" not in sent  # eval keeps params
    (node,) = trace(admin, key)["nodes"]
    ids, logprobs = expected_completion("streamed!")
    assert node["completion_token_ids"] == ids and node["completion_logprobs"] == pytest.approx(logprobs)
    assert node["prompt_token_ids"] == render_prompt(MESSAGES) and node["dropped_params"] == []


def test_stream_without_usage_request_gets_no_usage_chunk(stack):
    engine = FakeEngine([Reply(text="hi")])
    proxy, admin = stack(engine)
    key = new_session(admin)
    chunks = list(sdk(proxy, key).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert all(c.usage is None for c in chunks) and chunks[-1].choices[0].finish_reason == "stop"
    assert engine.requests[0]["stream_options"] == {"include_usage": True}  # the trace still gets usage
    assert trace(admin, key)["nodes"][0]["usage"]["prompt_tokens"] == len(render_prompt(MESSAGES))


@pytest.mark.parametrize("stream", [False, True])
def test_two_turn_tool_call_round_trip_links_nodes(stack, stream):
    engine = FakeEngine([Reply(tool_calls=[("bash", {"command": "echo hello > out.txt"})]), Reply(text="Done.")])
    proxy, admin = stack(engine)
    key = new_session(admin)
    client = sdk(proxy, key)

    def call(messages):
        if not stream:
            choice = client.chat.completions.create(model="m", messages=messages, tools=[BASH_TOOL]).choices[0]
            return choice.message.content, [tc.model_dump() for tc in choice.message.tool_calls or []]
        text, calls = "", {}
        for chunk in client.chat.completions.create(model="m", messages=messages, tools=[BASH_TOOL], stream=True):
            delta = chunk.choices[0].delta if chunk.choices else None
            text += (delta and delta.content) or ""
            for tc in (delta and delta.tool_calls) or []:
                slot = calls.setdefault(
                    tc.index, {"id": tc.id, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                slot["function"]["name"] += tc.function.name or ""
                slot["function"]["arguments"] += tc.function.arguments or ""
        return text or None, list(calls.values())

    content, tool_calls = call(MESSAGES)
    assert len(tool_calls) == 1 and tool_calls[0]["function"]["name"] == "bash"
    assert json.loads(tool_calls[0]["function"]["arguments"]) == {"command": "echo hello > out.txt"}
    followup = MESSAGES + [
        {"role": "assistant", "content": content, "tool_calls": tool_calls},
        {"role": "tool", "tool_call_id": tool_calls[0]["id"], "content": "(no output)"},
    ]
    content2, tool_calls2 = call(followup)
    assert content2 == "Done." and tool_calls2 == []

    t = trace(admin, key)
    first, second = t["nodes"]
    assert first["finish_reason"] == "tool_calls" and first["tool_calls"][0]["function"]["name"] == "bash"
    assert second["parent"] == first["id"]
    (seq,) = t["sequences"]
    assert seq["node_ids"] == [0, 1]
    assert sum(seq["loss_mask"]) == len(first["completion_token_ids"]) + len(second["completion_token_ids"])
    start = len(first["prompt_token_ids"])
    assert seq["logprobs"][start : start + len(first["completion_logprobs"])] == first["completion_logprobs"]


def test_unknown_or_missing_key_is_401_in_openai_shape(stack):
    proxy, admin = stack(FakeEngine())
    with pytest.raises(openai.AuthenticationError) as info:
        sdk(proxy, "not-a-session").chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.status_code == 401 and info.value.code == "invalid_api_key"
    resp = httpx.post(proxy.url + "/v1/chat/completions", json={"messages": MESSAGES}, trust_env=False)
    assert resp.status_code == 401
    assert resp.json()["error"]["type"] == "invalid_request_error"


def test_malformed_json_and_bad_fields_are_400(stack):
    proxy, admin = stack(FakeEngine())
    key = new_session(admin)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    resp = httpx.post(proxy.url + "/v1/chat/completions", content=b"{nope", headers=headers, trust_env=False)
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "invalid_request_error"
    resp = httpx.post(proxy.url + "/v1/chat/completions", json={"messages": []}, headers=headers, trust_env=False)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "messages"
    with pytest.raises(openai.BadRequestError):
        sdk(proxy, key).chat.completions.create(model="m", messages=MESSAGES, n=2)


@pytest.mark.parametrize("stream", [False, True])
def test_budget_exhaustion_answers_without_engine(stack, stream):
    engine = FakeEngine([Reply(tool_calls=[("bash", {"command": "ls"})])] * 3)
    proxy, admin = stack(engine)
    key = new_session(admin, max_requests=1)
    client = sdk(proxy, key)
    client.chat.completions.create(model="m", messages=MESSAGES, tools=[BASH_TOOL])
    if stream:
        chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, tools=[BASH_TOOL], stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    else:
        message = client.chat.completions.create(model="m", messages=MESSAGES, tools=[BASH_TOOL]).choices[0].message
        text = message.content
        assert not message.tool_calls
    assert "budget exhausted" in text.lower()
    assert len(engine.requests) == 1
    t = trace(admin, key)
    assert t["requests"] == 2 and [n["budget_exhausted"] for n in t["nodes"]] == [False, True]
    assert [s["node_ids"] for s in t["sequences"]] == [[0]]


def test_admin_api_auth_validation_and_delete(stack):
    proxy, admin = stack(FakeEngine())
    url = proxy.url + "/admin/sessions"
    body = {"adapter": None, "purpose": "train", "max_requests": 3}
    assert httpx.post(url, json=body, trust_env=False).status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert httpx.post(url, json=body, headers=wrong, trust_env=False).status_code == 401
    assert httpx.get(url + "/x/trace", headers=wrong, trust_env=False).status_code == 401
    bad_bodies = {
        "purpose": {"adapter": None, "purpose": "play"},
        "max_requests": {"purpose": "train", "max_requests": -1},
        "sampling.temperature": {"purpose": "train", "sampling": {"temperature": "hot"}},
        "sampling.top_k": {"purpose": "train", "sampling": {"top_k": 3}},
        "adaptor": {"adaptor": "x", "purpose": "train"},
    }
    for field, bad in bad_bodies.items():
        resp = admin.post("/admin/sessions", json=bad)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == field, (field, resp.text)
        assert field in resp.json()["error"]["message"]
    assert admin.get("/admin/sessions/unknown/trace").status_code == 404
    key = new_session(admin)
    ended = admin.delete(f"/admin/sessions/{key}")
    assert ended.status_code == 200 and ended.json()["key"] == key
    with pytest.raises(openai.AuthenticationError):
        sdk(proxy, key).chat.completions.create(model="m", messages=MESSAGES)


def test_engine_down_is_502_and_recorded(stack):
    proxy, admin = stack(FakeEngine(), engine_url="http://127.0.0.1:9")  # discard port: refused
    key = new_session(admin)
    with pytest.raises(openai.InternalServerError) as info:
        sdk(proxy, key).chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.status_code == 502
    with pytest.raises(openai.InternalServerError):
        sdk(proxy, key).chat.completions.create(model="m", messages=MESSAGES, stream=True)
    t = trace(admin, key)
    assert [f["kind"] for f in t["failures"]] == ["upstream_unreachable"] * 2 and t["nodes"] == []


def test_engine_error_status_is_relayed_and_recorded(stack):
    proxy, admin = stack(FakeEngine(status=400))
    key = new_session(admin)
    with pytest.raises(openai.BadRequestError):
        sdk(proxy, key).chat.completions.create(model="m", messages=MESSAGES)
    (failure,) = trace(admin, key)["failures"]
    assert failure["kind"] == "upstream_error" and failure["status"] == 400


def test_mid_stream_failure_ends_stream_with_error_and_records(stack):
    proxy, admin = stack(FakeEngine([Reply(text="partial reply")], fail_after_chunks=4))
    key = new_session(admin)
    received = ""
    with pytest.raises(openai.APIError):
        for chunk in sdk(proxy, key).chat.completions.create(model="m", messages=MESSAGES, stream=True):
            received += (chunk.choices and chunk.choices[0].delta.content) or ""
    assert received == "par"  # relayed before the failure
    t = trace(admin, key)
    assert t["nodes"] == [] and [f["kind"] for f in t["failures"]] == ["upstream_stream_error"]


@pytest.mark.parametrize("stream", [False, True])
def test_missing_token_ids_is_a_recorded_failure(stack, stream):
    proxy, admin = stack(FakeEngine([Reply(text="hi")], omit_token_ids=True))
    key = new_session(admin)
    client = sdk(proxy, key)
    if stream:
        text = "".join(
            (c.choices and c.choices[0].delta.content) or ""
            for c in client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        )
    else:
        text = client.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content
    assert text == "hi"  # the harness is served; the session is marked
    t = trace(admin, key)
    assert t["nodes"] == [] and [f["kind"] for f in t["failures"]] == ["missing_token_ids"]
