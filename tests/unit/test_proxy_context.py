"""The model's context is part of the attempt: the proxy fits each call's output budget into what the prompt leaves
of the context (retrying once after an older vLLM's refusal), and answers a prompt that alone fills the context
with a plain reply in the harness's dialect, recorded as a ``context_exhausted`` event, never as a failure."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from harness_rl.proxy.context import parse_context_refusal
from harness_rl.proxy.server import ProxyServer, UvicornThread
from harness_rl.proxy.toy_chat_template import render_prompt
from harness_rl.testkit.fake_vllm import FakeEngine, Reply
from tests.proxy_helpers import new_session, trace

ADMIN = "admin-secret"
MESSAGES = [{"role": "user", "content": "Say hello."}]
PROMPT = len(render_prompt(MESSAGES))  # the toy tokenizer's prompt length of MESSAGES
LONG_REPLY = "a reply far longer than the room the context leaves"


@pytest.fixture(scope="module")
def engine_server():
    engine = FakeEngine()
    with UvicornThread(engine.app) as server:
        yield engine, server


@pytest.fixture
def start(engine_server):
    """start(context_length=None, **engine behaviour) -> (engine, proxy, admin): a fresh proxy, so what it learns
    about the context in one test cannot change another."""
    engine, server = engine_server
    stop = []

    def _start(context_length: int | None = None, **behaviour):
        engine.reset([Reply(text=LONG_REPLY)], **behaviour)
        proxy = ProxyServer(server.url, ADMIN, base_model="base-model", context_length=context_length).start()
        admin = httpx.Client(base_url=proxy.url, headers={"Authorization": f"Bearer {ADMIN}"}, trust_env=False)
        stop.append((proxy, admin))
        return engine, proxy, admin

    yield _start
    for proxy, admin in stop:
        admin.close()
        proxy.stop()


def chat(proxy, key, stream: bool, messages=MESSAGES) -> tuple[str, str]:
    """(text, finish_reason) of one call through the real openai SDK."""
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0,
                           http_client=httpx.Client(trust_env=False))  # fmt: skip
    if not stream:
        choice = client.chat.completions.create(model="m", messages=messages).choices[0]
        return choice.message.content or "", choice.finish_reason
    text, finish = "", None
    for chunk in client.chat.completions.create(model="m", messages=messages, stream=True):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return text, finish


# --- the engine's messages (vllm/renderers/params.py and api_utils.py in 0.32; serving_engine.py before) ----------

V032_PROMPT = (
    "This model's maximum context length is 8192 tokens. However, your prompt contains 9000 input tokens, "
    "which exceeds this limit even without any output tokens. Please reduce the length of the input prompt."
)
V032_AT_LEAST = V032_PROMPT.replace("contains 9000", "contains at least 8193")
V032_CHARS = (
    "This model's maximum context length is 8192 tokens. However, your prompt contains 90000 characters "
    "(more than 49152 characters, which is the upper bound for 8192 input tokens). Please reduce the "
    "length of the input prompt."
)
V032_OVER = "max_tokens=9000 cannot be greater than max_model_len=8192. Please request fewer output tokens."
V032_ZERO = "max_tokens must be at least 1, got 0."
V011_TOO_LARGE = (
    "'max_tokens' or 'max_completion_tokens' is too large: 4000. This model's maximum context length is "
    "8192 tokens and your request has 7000 input tokens (4000 > 8192 - 7000)."
)
V011_PROMPT = (
    "This model's maximum context length is 8192 tokens. However, your request has 9000 input tokens. "
    "Please reduce the length of the input messages."
)
V06_BOTH = ("This model's maximum context length is 8192 tokens. However, you requested 11000 tokens (7000 in the "
            "messages, 4000 in the completion). Please reduce the length of the messages or completion.")  # fmt: skip


@pytest.mark.parametrize(
    "message, sent, expected",
    [
        (V032_PROMPT, 64, (8192, 9000, None)),
        (V032_AT_LEAST, 64, (8192, 8193, None)),
        (V032_CHARS, 64, (8192, None, None)),
        (V032_OVER, 9000, (8192, None, 8192)),
        (V032_ZERO, 64, (None, None, None)),
        (V011_TOO_LARGE, 4000, (8192, 7000, 1192)),
        (V011_TOO_LARGE.replace("7000", "8192"), 4000, (8192, 8192, None)),
        (V011_PROMPT, 64, (8192, 9000, None)),
        (V06_BOTH, 4000, (8192, 7000, 1192)),
    ],
)
def test_context_refusals_of_each_vllm_version_are_read(message, sent, expected):
    refusal = parse_context_refusal(message, sent)
    assert (refusal.max_model_len, refusal.prompt_tokens, refusal.retry_max_tokens) == expected
    assert refusal.exhausted == (expected[2] is None)


@pytest.mark.parametrize(
    "message, sent",
    [
        ("scripted failure", 64),
        ("max_tokens must be at least 1, got 0.", 0),  # the client itself asked for nothing
        (V011_TOO_LARGE, 1000),  # a retry with 1192 could not be smaller than what was sent
    ],
)
def test_other_refusals_are_left_alone(message, sent):
    assert parse_context_refusal(message, sent) is None


# --- the relay ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_an_output_budget_over_the_context_is_clamped_and_retried(start, stream):
    """An older vLLM refuses prompt + max_tokens > context: the proxy sends it again with what is left."""
    room = 7
    engine, proxy, admin = start(context_limit=PROMPT + room, refuse_long_output=True)
    key = new_session(admin, sampling={"max_tokens": 64})
    text, finish = chat(proxy, key, stream)
    assert [r["max_tokens"] for r in engine.requests] == [64, room]
    assert text == LONG_REPLY[:room] and finish == "length"
    t = trace(admin, key)
    assert t["failures"] == [] and len(t["nodes"]) == 1 and len(t["nodes"][0]["completion_token_ids"]) == room
    (event,) = t["events"]
    assert event["kind"] == "max_tokens_clamped"
    assert (event["requested"], event["max_tokens"], event["prompt_tokens"]) == (64, room, PROMPT)


def test_an_output_budget_over_the_whole_context_is_capped_before_the_call(start):
    """vLLM 0.32 refuses max_tokens > max_model_len outright; the proxy caps it, from the start when it is told the
    context length, else after the first refusal (which names it)."""
    limit = PROMPT + 7
    engine, proxy, admin = start(context_length=limit, context_limit=limit)
    key = new_session(admin, sampling={"max_tokens": 64})
    assert chat(proxy, key, False) == (LONG_REPLY[:7], "length")  # vLLM 0.32 clamps the rest itself
    assert [r["max_tokens"] for r in engine.requests] == [limit]

    engine, proxy, admin = start(context_limit=limit)
    engine.replies.append(Reply(text=LONG_REPLY))
    key = new_session(admin, sampling={"max_tokens": 64})
    assert chat(proxy, key, True) == (LONG_REPLY[:7], "length")
    assert chat(proxy, key, False) == (LONG_REPLY[:7], "length")  # learned: no refusal this time
    assert [r["max_tokens"] for r in engine.requests] == [64, limit, limit]
    assert trace(admin, key)["failures"] == []


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("over", [1, 0], ids=["prompt-over-context", "prompt-exactly-context"])
@pytest.mark.parametrize("max_tokens", [4, 64])
def test_a_prompt_that_fills_the_context_gets_a_final_reply(start, stream, over, max_tokens):
    """With an output budget over the whole context, vLLM 0.32 first refuses that (the proxy caps it and asks
    again), and only then measures the prompt."""
    limit = PROMPT - over
    engine, proxy, admin = start(context_limit=limit)
    key = new_session(admin, sampling={"max_tokens": max_tokens})
    text, finish = chat(proxy, key, stream)
    assert "no longer fits in the model's context window" in text and finish == "length"
    capped = max_tokens > limit
    # The reply names the context length when the engine did (the exact-fit refusal does not name it).
    assert (f"({limit} tokens)" in text) == bool(over or capped)
    assert [r["max_tokens"] for r in engine.requests] == ([max_tokens, limit] if capped else [max_tokens])
    t = trace(admin, key)
    assert t["failures"] == [] and t["nodes"] == [] and t["requests"] == 1
    assert [e["kind"] for e in t["events"]] == ["max_tokens_clamped"] * capped + ["context_exhausted"]
    if over:  # vLLM names the prompt length only when the prompt is over the context
        assert (t["events"][-1]["prompt_tokens"], t["events"][-1]["max_model_len"]) == (PROMPT, limit)


@pytest.mark.parametrize("stream", [False, True])
def test_the_final_reply_speaks_the_anthropic_dialect(start, stream):
    """A Messages client sees an ordinary assistant turn that stopped at max_tokens."""
    engine, proxy, admin = start(context_limit=5)
    key = new_session(admin)
    client = anthropic.Anthropic(
        base_url=proxy.url, api_key=key, max_retries=0, http_client=anthropic.DefaultHttpxClient(trust_env=False)
    )
    kwargs = {"model": "m", "max_tokens": 64, "messages": MESSAGES}
    if stream:
        with client.messages.stream(**kwargs) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**kwargs)
    assert message.stop_reason == "max_tokens" and "context window" in message.content[0].text
    t = trace(admin, key)
    assert t["events"][-1]["kind"] == "context_exhausted" and t["failures"] == []


def test_a_compacted_prompt_after_a_full_context_reply_reaches_the_engine(start):
    """The full-context reply is not sticky: a harness that compacts its history and asks again is served."""
    long = [{"role": "user", "content": "x" * 50}]
    engine, proxy, admin = start(context_limit=PROMPT + 3)
    key = new_session(admin)
    assert chat(proxy, key, False, messages=long)[1] == "length"
    engine.replies = [Reply(text="ok")]
    assert chat(proxy, key, False) == ("ok", "stop")
    t = trace(admin, key)
    assert len(t["nodes"]) == 1 and [e["kind"] for e in t["events"]] == ["context_exhausted"] and not t["failures"]


def test_a_refusal_that_is_not_about_the_context_is_still_a_failure(start):
    engine, proxy, admin = start(status=400)
    key = new_session(admin)
    with pytest.raises(openai.BadRequestError):
        chat(proxy, key, False)
    t = trace(admin, key)
    assert [f["kind"] for f in t["failures"]] == ["upstream_error"] and t["events"] == []
