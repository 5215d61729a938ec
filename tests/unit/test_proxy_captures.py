"""Every captured harness request (six harnesses, first call and follow-up, streaming as captured) replays
through the real proxy app and gets a well-formed reply in its dialect, and the call lands in the trace."""

from __future__ import annotations

from typing import Any

import pytest

from harness_rl.proxy.toy_chat_template import render_prompt
from harness_rl.testkit.fake_vllm import Reply
from tests.fixtures.captures import CAPTURE_FILES, HARNESSES, load_capture, replay_headers
from tests.fixtures.inprocess_proxy import InProcessProxy
from tests.fixtures.reply_checks import check_anthropic_stream, check_chat_reply, check_responses_stream

DIALECTS = {
    "/v1/chat/completions": "openai_chat",
    "/v1/responses": "openai_responses",
    "/v1/messages": "anthropic_messages",
}
TOOL_ARGS = {"command": "echo hello > out.txt"}


@pytest.fixture(scope="module")
def proxy():
    with InProcessProxy() as stack:
        yield stack


def first_tool_name(body: dict[str, Any]) -> str:
    """The name of the first function tool the harness offers (its dialect's tool shape)."""
    for tool in body["tools"]:
        if isinstance(tool.get("function"), dict):
            return tool["function"]["name"]
        if tool.get("type", "function") == "function" and isinstance(tool.get("name"), str):
            if "input_schema" in tool or "parameters" in tool:
                return tool["name"]
    raise AssertionError("capture offers no function tool")


@pytest.mark.parametrize("name", CAPTURE_FILES)
@pytest.mark.parametrize("harness", HARNESSES)
def test_captured_request_replays(proxy, harness, name):
    capture = load_capture(harness, name)
    body = capture["body"]
    path = capture["path"].split("?")[0]
    dialect = DIALECTS[path]
    stream = body.get("stream") is True
    if name == "request.json":
        reply = Reply(text="Let me check.", tool_calls=[(first_tool_name(body), TOOL_ARGS)])
    else:
        reply = Reply(text="Done.")
    proxy.engine.reset([reply])
    key = proxy.new_session()

    resp = proxy.client.request(capture["method"], capture["path"], json=body, headers=replay_headers(capture, key))

    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/event-stream" if stream else "application/json")
    if dialect == "openai_chat":
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        text, calls = check_chat_reply(resp, stream, include_usage)
    elif dialect == "openai_responses":
        text, calls = check_responses_stream(resp)
    else:
        text, calls = check_anthropic_stream(resp)
    assert text == reply.text and calls == reply.tool_calls

    (sent,) = proxy.engine.requests
    assert sent["stream"] is stream and sent["return_token_ids"] is True
    trace = proxy.trace(key)
    assert trace["failures"] == [] and trace["requests"] == 1
    (node,) = trace["nodes"]
    assert node["dialect"] == dialect
    assert node["prompt_token_ids"] == render_prompt(sent["messages"])
    assert len(node["completion_token_ids"]) == len(node["completion_logprobs"]) > 0
    assert [c["function"]["name"] for c in node["tool_calls"]] == [n for n, _ in reply.tool_calls]
