"""Training sessions forward only the request fields a harness legitimately sends (an allowlist per dialect):
every field of every captured harness request still passes, and vLLM's extras never reach the engine; each
stripped field is counted on the session and the stripping is logged once per session."""

from __future__ import annotations

import json
import logging

import pytest

from harness_rl.proxy.dialects.anthropic_messages import AnthropicMessages
from harness_rl.proxy.dialects.openai_chat import OpenAIChat
from harness_rl.proxy.dialects.openai_responses import OpenAIResponses
from harness_rl.proxy.request_fields import OPENAI_CHAT_FIELDS, VLLM_EXTRAS, strip_unlisted
from harness_rl.testkit.fake_vllm import Reply
from tests.fixtures.captures import CAPTURE_DIR, CAPTURE_FILES, HARNESSES, load_capture, replay_headers
from tests.fixtures.inprocess_proxy import InProcessProxy

DIALECTS = {
    "/v1/chat/completions": OpenAIChat(),
    "/v1/responses": OpenAIResponses(),
    "/v1/messages": AnthropicMessages(),
}

# A value for each extra that would change what the engine does if it got through.
EXTRA_VALUES = {
    "vllm_xargs": {"k": 1},
    "chat_template": "{{ 'pwned' }}",
    "chat_template_kwargs": {"enable_thinking": True},
    "ignore_eos": True,
    "skip_special_tokens": False,
    "echo": True,
    "add_generation_prompt": False,
    "prompt_logprobs": 5,
    "min_tokens": 100,
    "allowed_token_ids": [1, 2],
    "bad_words": ["no"],
    "structured_outputs": {"regex": "a+"},
    "guided_json": {"type": "object"},
    "logits_processors": ["x"],
}


@pytest.fixture(scope="module")
def proxy():
    with InProcessProxy() as stack:
        yield stack


@pytest.mark.parametrize("name", CAPTURE_FILES)
@pytest.mark.parametrize("harness", HARNESSES)
def test_every_captured_field_passes_the_allowlist(harness, name):
    capture = load_capture(harness, name)
    dialect = DIALECTS[capture["path"].split("?")[0]]
    decoded = dialect.decode_request(capture["body"], {})
    body = dict(decoded.upstream_body)
    assert strip_unlisted(body, dialect.upstream_fields) == []
    assert body == decoded.upstream_body


@pytest.mark.parametrize("harness", HARNESSES)
def test_every_call_a_chat_harness_made_sends_only_public_fields(harness):
    """all_requests_index.json lists the body keys of every call the harness made in its captured session."""
    calls = json.loads((CAPTURE_DIR / harness / "all_requests_index.json").read_text())
    chat_keys = {k for c in calls if c["path"].startswith("/v1/chat/completions") for k in c.get("body_keys") or []}
    assert chat_keys <= OPENAI_CHAT_FIELDS


@pytest.mark.parametrize("name", CAPTURE_FILES)
@pytest.mark.parametrize("harness", HARNESSES)
def test_captured_requests_replay_in_a_train_session_with_nothing_stripped(proxy, harness, name):
    capture = load_capture(harness, name)
    proxy.engine.reset([Reply(text="Done.")])
    key = proxy.new_session(purpose="train")
    headers = replay_headers(capture, key)
    resp = proxy.client.request(capture["method"], capture["path"], json=capture["body"], headers=headers)
    assert resp.status_code == 200, resp.text
    assert proxy.trace(key)["stripped_fields"] == {}


def test_vllm_extras_never_reach_the_engine_and_are_counted_and_logged_once(proxy, caplog):
    assert not set(VLLM_EXTRAS) & OPENAI_CHAT_FIELDS
    proxy.engine.reset([Reply(text="a"), Reply(text="b")])
    key = proxy.new_session(purpose="train")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **EXTRA_VALUES}
    with caplog.at_level(logging.WARNING, logger="harness_rl.proxy.sessions"):
        for _ in range(2):
            resp = proxy.client.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
            assert resp.status_code == 200, resp.text
    for sent in proxy.engine.requests:
        assert not set(EXTRA_VALUES) & set(sent), sorted(set(EXTRA_VALUES) & set(sent))
        assert sent["return_token_ids"] is True  # the relay's own fields are set after the filter
    trace = proxy.trace(key)
    assert trace["stripped_fields"] == {name: 2 for name in EXTRA_VALUES}
    assert set(EXTRA_VALUES) <= set(trace["nodes"][0]["dropped_params"])
    assert len([r for r in caplog.records if "stripped request field" in r.getMessage()]) == 1


@pytest.mark.parametrize("extra", VLLM_EXTRAS)
def test_each_listed_extra_is_stripped_from_a_chat_request(extra):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], extra: 1}
    decoded = OpenAIChat().decode_request(body, {})
    upstream = dict(decoded.upstream_body)
    assert strip_unlisted(upstream, OpenAIChat.upstream_fields) == [extra]
    assert extra not in upstream
