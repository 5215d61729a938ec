"""Hostile and malformed bodies on every dialect endpoint never crash the proxy: each gets a well-formed
reply or an error in the dialect's error shape (5xx only when the engine failed), every counted call is
captured or recorded as a failure, other sessions are untouched, and valid requests keep working."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from harness_rl.proxy.dialects.wire_json import MAX_NESTING, check_json_body
from harness_rl.proxy.errors import ProxyError
from tests.fixtures.fuzz_bodies import (
    ENDPOINTS,
    GOOGLE_BODY,
    VALID_BODIES,
    json_values,
    mutations,
    nested,
    wrong_type,
)
from tests.fixtures.inprocess_proxy import InProcessProxy
from tests.fixtures.reply_checks import (
    check_anthropic_body,
    check_anthropic_stream,
    check_chat_reply,
    check_google_reply,
    check_responses_body,
    check_responses_stream,
    sse_blocks,
)

# Sessions the fuzz mixes in: the sampling policy and purpose change what the relay does with a request.
SESSION_SPECS = ({}, {"purpose": "eval"}, {"sampling": {"max_tokens": 32, "temperature": 0.5, "top_p": 0.9}})
# Engine behaviours the fuzz mixes in: the upstream fails in every way the relay handles.
ENGINE_MODES = (
    {},
    {"status": 500},
    {"status": 400},
    {"fail_after_chunks": 2},
    {"omit_token_ids": True},
)
FAILURE_KINDS = {
    "upstream_error",
    "upstream_unreachable",
    "upstream_stream_error",
    "missing_token_ids",
    "logprobs_mismatch",
}
SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


@pytest.fixture(scope="module")
def proxy():
    with InProcessProxy() as stack:
        yield stack


@pytest.fixture(scope="module", autouse=True)
def bystander(proxy):
    """A session with one finished call; no fuzzed request in this module may change its trace."""
    key = proxy.new_session()
    resp = send(proxy, "chat", key, encode(VALID_BODIES["chat"][1]))
    assert resp.status_code == 200, resp.text
    trace = proxy.trace(key)
    yield
    assert proxy.trace(key) == trace


def send(proxy: InProcessProxy, name: str, key: str, content: bytes):
    endpoint = ENDPOINTS[name]
    value = f"Bearer {key}" if endpoint.auth_header == "authorization" else key
    headers = {endpoint.auth_header: value, "content-type": "application/json"}
    return proxy.client.post(endpoint.path, content=content, headers=headers)


def encode(body: Any) -> bytes:
    """JSON as Python writes it: NaN/Infinity literals and lone surrogates as \\ud800 escapes included."""
    return json.dumps(body).encode()


def check_error_shape(name: str, resp) -> None:
    """The error body is exactly the dialect's error shape."""
    body = resp.json()
    dialect = ENDPOINTS[name].dialect
    if dialect in ("openai_chat", "openai_responses"):
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
        assert isinstance(body["error"]["message"], str) and isinstance(body["error"]["type"], str)
        assert body["error"]["param"] is None or isinstance(body["error"]["param"], str)
    elif dialect == "anthropic_messages":
        assert body["type"] == "error" and set(body) == {"type", "error"}
        assert set(body["error"]) == {"type", "message"} and isinstance(body["error"]["message"], str)
        expected = "invalid_request_error" if 400 <= resp.status_code < 500 else "api_error"
        assert body["error"]["type"] in (expected, "request_too_large")
    else:
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "status"}
        assert body["error"]["code"] == resp.status_code and isinstance(body["error"]["message"], str)


def check_success(name: str, resp, body: Any) -> None:
    """A 200 reply parses as the dialect's reply (or stream) with the real SDK types."""
    dialect = ENDPOINTS[name].dialect
    stream = resp.headers["content-type"].startswith("text/event-stream")
    if dialect == "openai_chat":
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        check_chat_reply(resp, stream, include_usage)
    elif dialect == "openai_responses":
        check_responses_stream(resp) if stream else check_responses_body(resp.json())
    elif dialect == "anthropic_messages":
        check_anthropic_stream(resp) if stream else check_anthropic_body(resp.json())
    else:
        assert stream == (name == "google_stream")
        check_google_reply(resp, stream)


def check_stream_ends_in_error(name: str, resp) -> None:
    """A stream cut by an engine failure ends with the dialect's error event."""
    dialect = ENDPOINTS[name].dialect
    event, data = sse_blocks(resp.text)[-1 if dialect != "openai_chat" else -2]
    last = json.loads(data)
    if dialect == "openai_responses":
        assert last["type"] == "response.failed" and last["response"]["error"]["message"]
    elif dialect == "anthropic_messages":
        assert event == "error" and last["error"]["type"] == "api_error"
    else:
        assert set(last) == {"error"} and last["error"]["message"]


def exchange(
    proxy: InProcessProxy,
    name: str,
    content: bytes,
    body: Any = None,
    engine_mode: dict | None = None,
    session_spec: dict | None = None,
    *,
    in_hypothesis: bool = True,
):
    """Sends one body on a fresh session and checks the reply and the session's record."""
    proxy.engine.reset(**(engine_mode or {}))
    key = proxy.new_session(**(session_spec or {}))
    session = proxy.session(key)
    resp = send(proxy, name, key, content)

    failures = session.failures
    if in_hypothesis:  # the outcome mix, shown by --hypothesis-show-statistics
        event(f"{name}: {resp.status_code} {'+'.join(f['kind'] for f in failures)}")
    assert session.requests == len(session.graph) + len(failures), "a counted call was neither captured nor failed"
    assert all(f["kind"] in FAILURE_KINDS and isinstance(f["message"], str) for f in failures), failures
    assert resp.status_code in (200, 400, 404, 413, 502), resp.text[:500]
    if resp.status_code == 502:
        assert [f["kind"] for f in failures] in (["upstream_error"], ["upstream_unreachable"])
    if resp.status_code == 400 and failures:
        assert engine_mode == {"status": 400} and [f["kind"] for f in failures] == ["upstream_error"]
    if resp.status_code != 200:
        check_error_shape(name, resp)
        if not failures:  # refused before the engine: not counted against the budget, nothing recorded
            assert session.requests == 0 and len(session.graph) == 0
        return resp
    if failures and failures[0]["kind"] == "upstream_stream_error":
        check_stream_ends_in_error(name, resp)
        return resp
    check_success(name, resp, body)
    if not failures:
        (node,) = session.graph.nodes
        assert len(node.completion_token_ids) == len(node.completion_logprobs) > 0
        assert node.dialect == ENDPOINTS[name].dialect and node.parent is None
    return resp


def check_still_serving(proxy: InProcessProxy) -> None:
    """After the fuzz every endpoint still serves a valid request and captures it."""
    for name, bodies in VALID_BODIES.items():
        resp = exchange(proxy, name, encode(bodies[0]), bodies[0], in_hypothesis=False)
        assert resp.status_code == 200, (name, resp.text[:500])


@settings(max_examples=500, **SETTINGS)
@given(name=st.sampled_from(tuple(ENDPOINTS)), body=json_values)
@example(name="chat", body=nested(MAX_NESTING + 1))
@example(name="responses", body={"input": "hi", "temperature": math.nan})
@example(name="messages", body={"messages": [{"role": "user", "content": "\ud800"}], "max_tokens": 5})
def test_random_json_values(proxy, name, body):
    exchange(proxy, name, encode(body), body)


@settings(max_examples=500, **SETTINGS)
@given(data=st.data(), name=st.sampled_from(tuple(ENDPOINTS)))
def test_wrong_types_in_every_field(proxy, data, name):
    """A valid request with some of the fields its codec reads replaced by values of any type."""
    body = copy.deepcopy(data.draw(st.sampled_from(VALID_BODIES[name])))
    fields = data.draw(st.sets(st.sampled_from(ENDPOINTS[name].fields), min_size=1, max_size=3))
    for field in sorted(fields):
        body[field] = data.draw(json_values | st.just(wrong_type(body.get(field))))
    exchange(proxy, name, encode(body), body)


@settings(max_examples=900, **SETTINGS)
@given(mutation=mutations(), engine_mode=st.sampled_from(ENGINE_MODES), session_spec=st.sampled_from(SESSION_SPECS))
# Regressions found by this fuzz (each was a 500):
@example(  # an Anthropic image block whose source is not an object
    mutation=("messages", {"messages": [{"role": "user", "content": [{"type": "image", "source": "x"}]}]}),
    engine_mode={},
    session_spec={},
)
@example(  # a Responses message item whose role is a list (unhashable in the role lookup)
    mutation=("responses", {"input": [{"type": "message", "role": ["user"], "content": "hi"}]}),
    engine_mode={},
    session_spec={},
)
@example(  # a function tool_choice whose name is an object (unhashable in the tool-name set)
    mutation=("responses", {**VALID_BODIES["responses"][0], "tool_choice": {"type": "function", "name": {}}}),
    engine_mode={},
    session_spec={},
)
@example(  # Google functionDeclarations that is a number (iterated)
    mutation=("google", {**GOOGLE_BODY, "tools": [{"functionDeclarations": 5}]}),
    engine_mode={},
    session_spec={},
)
@example(  # a non-ASCII digit string in a Google schema's int64 field (isdigit() but not int())
    mutation=(
        "google",
        {**GOOGLE_BODY, "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"maxLength": "²"}}]}]},
    ),
    engine_mode={},
    session_spec={},
)
@example(  # a chat max_tokens string meets the session's max_tokens cap in the sampling policy
    mutation=("chat", {**VALID_BODIES["chat"][1], "max_tokens": "twelve"}),
    engine_mode={},
    session_spec=SESSION_SPECS[2],
)
@example(  # Infinity as temperature (httpx encodes the engine request with allow_nan=False)
    mutation=("chat", {**VALID_BODIES["chat"][1], "temperature": math.inf}),
    engine_mode={},
    session_spec={},
)
def test_mutated_captured_requests(proxy, mutation, engine_mode, session_spec):
    name, body = mutation
    exchange(proxy, name, encode(body), body, engine_mode, session_spec)


@settings(max_examples=150, **SETTINGS)
@given(name=st.sampled_from(tuple(ENDPOINTS)), data=st.data())
def test_non_json_bytes(proxy, name, data):
    valid = encode(VALID_BODIES[name][0])
    content = data.draw(
        st.binary(max_size=64)
        | st.integers(1, len(valid) - 1).map(lambda n: valid[:n])  # truncated JSON
        | st.sampled_from((b"", b"\xff\xfe", b"NaN", b'"\xed\xa0\x80"', '{"a": "\u00e9"}'.encode("latin-1")))
    )
    resp = exchange(proxy, name, content)
    assert resp.status_code in (400, 200)


def test_lone_surrogates_become_replacement_characters(proxy):
    """A JavaScript harness that cut a tool output inside a surrogate pair still gets its call served."""
    assert check_json_body({"a\ud800": ["x\udfffy", "ok", "é😀"]}) == {"a\ufffd": ["x\ufffdy", "ok", "é😀"]}
    body = {"model": "m", "messages": [{"role": "user", "content": "cut \ud83d"}]}
    resp = exchange(proxy, "chat", encode(body), body, in_hypothesis=False)
    assert resp.status_code == 200
    assert proxy.engine.requests[0]["messages"][0]["content"] == "cut \ufffd"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"content": math.nan}]}, "messages[0].content"),
        ({"t": -math.inf}, "t"),
        ([[{"a": [math.inf]}]], "[0][0].a[0]"),
        ({"a": nested(MAX_NESTING)}, "a[0]" + ".k[0]" * (MAX_NESTING // 2 - 1)),
    ],
)
def test_non_finite_numbers_and_deep_nesting_are_refused(body, param):
    with pytest.raises(ProxyError) as info:
        check_json_body(body)
    assert info.value.status == 400 and info.value.param == param
    assert check_json_body(nested(MAX_NESTING)) == nested(MAX_NESTING)  # one level less is fine


def test_json_nested_beyond_the_parser_limit_is_a_400(proxy):
    key = proxy.new_session()
    resp = send(proxy, "responses", key, b"[" * 100_000 + b"]" * 100_000)
    assert resp.status_code == 400
    check_error_shape("responses", resp)
    # The same body on a path no dialect owns: detection cannot parse it either, and says so.
    resp = proxy.client.post("/elsewhere", content=b"[" * 100_000, headers={"authorization": f"Bearer {key}"})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "unknown_dialect"


def test_session_budget_and_sessions_survive_the_fuzz(proxy):
    """After all the fuzzing above, every endpoint still serves and captures, and a budget still holds."""
    check_still_serving(proxy)
    key = proxy.new_session(max_requests=1)
    for name in ENDPOINTS:
        resp = exchange_counted(proxy, key, name)
        assert resp.status_code == 200
    trace = proxy.trace(key)
    assert trace["requests"] == len(ENDPOINTS) and trace["failures"] == []
    assert [n["budget_exhausted"] for n in trace["nodes"]] == [False] + [True] * (len(ENDPOINTS) - 1)


def exchange_counted(proxy: InProcessProxy, key: str, name: str):
    proxy.engine.reset()
    body = VALID_BODIES[name][0]
    resp = send(proxy, name, key, encode(body))
    if resp.status_code == 200:
        check_success(name, resp, body)
    return resp
