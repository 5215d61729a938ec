"""Everything around the dialect codecs: model listings, dialect detection on other paths, the JSONL trace
export, and a client that hangs up mid-stream."""

import json
import time

import anthropic
import httpx
import openai
import pytest

from harness_rl.proxy.detect import ANTHROPIC, CHAT, GOOGLE, RESPONSES, by_body, by_headers, by_path, detect
from harness_rl.proxy.export import read_trace_jsonl, trace_from_records, trace_to_jsonl, write_trace_jsonl
from harness_rl.proxy.server import ProxyServer, UvicornThread
from harness_rl.testkit.fake_vllm import FakeEngine, Reply
from tests.proxy_helpers import new_session, trace

ADMIN = "admin-secret"
MESSAGES = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def servers():
    engine = FakeEngine(max_model_len=12345)
    with UvicornThread(engine.app) as engine_server:
        with ProxyServer(engine_server.url, ADMIN, base_model="base-model") as proxy:
            admin = httpx.Client(base_url=proxy.url, headers={"Authorization": f"Bearer {ADMIN}"}, trust_env=False)
            yield engine, proxy, admin
            admin.close()


@pytest.fixture
def stack(servers):
    engine, proxy, admin = servers
    engine.reset()
    return engine, proxy, admin


def get(proxy, path, **headers):
    return httpx.get(proxy.url + path, headers=headers, trust_env=False)


# --- model listings ---------------------------------------------------------------------------------------------


def test_model_listings_answer_with_the_sessions_model_and_context_length(stack):
    _, proxy, admin = stack
    key = new_session(admin, adapter="pi-v3", client_model="harness-rl", sampling={"max_tokens": 256})

    listing = get(proxy, "/v1/models", authorization=f"Bearer {key}")
    assert listing.status_code == 200
    cards = listing.json()["data"]
    assert [c["id"] for c in cards] == ["pi-v3", "harness-rl"]
    assert all(c["context_length"] == 12345 and c["max_model_len"] == 12345 for c in cards)
    assert cards[0]["top_provider"] == {"context_length": 12345, "max_completion_tokens": 256}

    # The real openai SDK reads the list; hermes' OpenRouter-style probe gets the same cards.
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, http_client=httpx.Client(trust_env=False))
    assert [m.id for m in client.models.list()] == ["pi-v3", "harness-rl"]
    assert get(proxy, "/api/v1/models", authorization=f"Bearer {key}").json()["data"] == cards

    one = get(proxy, "/v1/models/whatever/name", authorization=f"Bearer {key}")
    assert one.status_code == 200 and one.json()["id"] == "whatever/name" and one.json()["context_length"] == 12345


def test_model_listing_of_a_base_model_session_and_other_auth_headers(stack):
    _, proxy, admin = stack
    key = new_session(admin)
    for headers in ({"x-api-key": key}, {"x-goog-api-key": key}):
        assert [c["id"] for c in get(proxy, "/v1/models", **headers).json()["data"]] == ["base-model"]


def test_model_listing_needs_a_known_key(stack):
    _, proxy, _ = stack
    for headers in ({}, {"authorization": "Bearer nope"}):
        resp = get(proxy, "/v1/models", **headers)
        assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_api_key"


def test_client_model_is_validated(stack):
    _, _, admin = stack
    resp = admin.post("/admin/sessions", json={"purpose": "train", "client_model": ""})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "client_model"


# --- dialect detection ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "dialect", "params"),
    [
        ("/chat/completions", CHAT, {}),
        ("/v1/v1/chat/completions", CHAT, {}),
        ("/openai/responses", RESPONSES, {}),
        ("/api/v1/messages", ANTHROPIC, {}),
        ("/v1alpha/models/gemini-x:streamGenerateContent", GOOGLE, {"model_action": "gemini-x:streamGenerateContent"}),
    ],
)
def test_detect_by_path(path, dialect, params):
    found = by_path(path)
    assert (found.dialect, found.evidence, found.path_params) == (dialect, "path", params)


def test_detect_by_headers_then_body():
    assert by_headers({"anthropic-version": "2023-06-01"}, {}).dialect == ANTHROPIC
    assert by_headers({"x-goog-api-key": "k"}, {"alt": "sse"}).path_params == {
        "model_action": "unknown:streamGenerateContent"
    }
    assert by_headers({"authorization": "Bearer k"}, {}) is None  # both OpenAI dialects use it

    assert by_body({"contents": []}, {}).dialect == GOOGLE
    assert by_body({"input": "hi", "model": "m"}, {}).dialect == RESPONSES
    assert by_body({"messages": MESSAGES, "max_tokens": 5}, {}).dialect == CHAT
    assert by_body({"messages": MESSAGES, "system": "be brief", "max_tokens": 5}, {}).dialect == ANTHROPIC
    tool_result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}
    assert by_body({"messages": [tool_result]}, {}).dialect == ANTHROPIC
    assert by_body({"messages": MESSAGES, "tools": [{"name": "bash", "input_schema": {}}]}, {}).dialect == ANTHROPIC
    # A chat-only role wins over an Anthropic-looking field.
    chat = {"messages": [{"role": "system", "content": "x"}, *MESSAGES], "system": "y"}
    assert by_body(chat, {}).dialect == CHAT
    assert by_body([1, 2], {}) is None and by_body({"prompt": "x"}, {}) is None

    # Order: the path outranks headers, headers outrank the body.
    found = detect("/v1/chat/completions", {"x-api-key": "k"}, {}, {"contents": []})
    assert (found.dialect, found.evidence) == (CHAT, "path")
    found = detect("/x", {"x-api-key": "k"}, {}, {"contents": []})
    assert (found.dialect, found.evidence) == (ANTHROPIC, "headers")


def test_sdks_reach_the_proxy_through_other_paths(stack):
    engine, proxy, admin = stack
    engine.reset([Reply(text="one"), Reply(text="two"), Reply(text="three")])
    key = new_session(admin)

    # A base URL without /v1: the openai SDK posts to /chat/completions.
    chat = openai.OpenAI(base_url=proxy.url, api_key=key, max_retries=0, http_client=httpx.Client(trust_env=False))
    assert chat.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content == "one"

    # A base URL with an extra prefix: the anthropic SDK posts to /api/v1/messages.
    claude = anthropic.Anthropic(
        base_url=proxy.url + "/api",
        api_key=key,
        max_retries=0,
        http_client=anthropic.DefaultHttpxClient(trust_env=False),
    )
    reply = claude.messages.create(model="m", max_tokens=16, messages=MESSAGES)
    assert reply.content[0].text == "two"

    # Body shape only: a Google body on a path no dialect owns, keyed by x-goog-api-key.
    resp = httpx.post(
        proxy.url + "/generate",
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        headers={"x-goog-api-key": key},
        trust_env=False,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["candidates"][0]["content"]["parts"][0]["text"] == "three"

    t = trace(admin, key)
    assert [n["dialect"] for n in t["nodes"]] == ["openai_chat", "anthropic_messages", "google_generate"]


def test_unknown_dialect_is_a_clear_error_and_the_proxy_keeps_serving(stack):
    engine, proxy, admin = stack
    key = new_session(admin)
    for body in (b'{"prompt": "hi"}', b"not json", b""):
        resp = httpx.post(proxy.url + "/complete", content=body, headers={"authorization": f"Bearer {key}"})
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "unknown_dialect"
        assert "/v1/chat/completions" in resp.json()["error"]["message"]
    assert get(proxy, "/nothing/here").status_code == 404
    # Detected dialect, malformed JSON: the dialect's own 400.
    resp = httpx.post(proxy.url + "/chat/completions", content=b"{oops", headers={"authorization": f"Bearer {key}"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "body"
    assert trace(admin, key)["requests"] == 0  # none of these reached a session's budget


def test_detected_route_respects_the_body_limit():
    engine = FakeEngine()
    with UvicornThread(engine.app) as engine_server:
        with ProxyServer(engine_server.url, ADMIN, base_model="base-model", max_body_bytes=1000) as proxy:
            resp = httpx.post(proxy.url + "/anything", content=b"x" * 5000, trust_env=False)
            assert resp.status_code == 413


# --- JSONL export -----------------------------------------------------------------------------------------------


def test_trace_exports_as_jsonl_and_reads_back(stack, tmp_path):
    engine, proxy, admin = stack
    engine.reset([Reply(text="hi"), Reply(text="again")])
    key = new_session(admin)
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, http_client=httpx.Client(trust_env=False))
    first = client.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content
    follow_up = [*MESSAGES, {"role": "assistant", "content": first}, {"role": "user", "content": "More."}]
    client.chat.completions.create(model="m", messages=follow_up)

    full = trace(admin, key)
    resp = admin.get(f"/admin/sessions/{key}/trace", params={"format": "jsonl"})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/x-ndjson")
    records = [json.loads(line) for line in resp.text.splitlines()]
    assert [r["type"] for r in records] == ["session", "node", "node", "sequence"]
    assert records[0]["key"] == key and records[2]["parent"] == 0
    assert trace_from_records(records) == full

    path = tmp_path / "trace.jsonl"
    write_trace_jsonl(path, full)
    assert read_trace_jsonl(path) == full
    assert path.read_text() == trace_to_jsonl(full)
    assert [p.name for p in tmp_path.iterdir()] == ["trace.jsonl"]  # no temporary file left

    assert admin.get(f"/admin/sessions/{key}/trace", params={"format": "xml"}).status_code == 400


def test_jsonl_reader_names_bad_records():
    with pytest.raises(ValueError, match="no session header"):
        trace_from_records([{"type": "node", "id": 0}])
    with pytest.raises(ValueError, match="record 2: unknown type 'nodes'"):
        trace_from_records([{"type": "session", "key": "k"}, {"type": "nodes"}])
    with pytest.raises(ValueError, match="second session header"):
        trace_from_records([{"type": "session"}, {"type": "session"}])


# --- client disconnect mid-stream -------------------------------------------------------------------------------


def test_client_disconnect_mid_stream_is_recorded_and_others_are_served(stack):
    engine, proxy, admin = stack
    engine.reset([Reply(text="x" * 200), Reply(text="fine")], chunk_delay_s=0.02)
    gone, other = new_session(admin), new_session(admin)
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    with httpx.Client(trust_env=False) as client:
        with client.stream(
            "POST", proxy.url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {gone}"}
        ) as resp:
            lines = resp.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))  # the stream has started
        # Leaving the block closed the connection after a few of the 200 tokens.

    deadline = time.monotonic() + 10
    while not trace(admin, gone)["failures"] and time.monotonic() < deadline:
        time.sleep(0.05)
    t = trace(admin, gone)
    assert [f["kind"] for f in t["failures"]] == ["client_disconnected"]
    assert t["nodes"] == [] and t["sequences"] == []  # a half-sampled call never becomes training data

    engine.chunk_delay_s = 0.0
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=other, http_client=httpx.Client(trust_env=False))
    stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "fine"
    assert trace(admin, other)["failures"] == []
