"""Anthropic Messages replies: a chat.completion as an Anthropic `message`, and the vocabulary the reply
and its stream share (stop reasons, usage, ids, error types)."""

from __future__ import annotations

import uuid
from typing import Any

from harness_rl.proxy.dialects.anthropic_request import tool_input
from harness_rl.proxy.dialects.base import DecodedRequest
from harness_rl.proxy.errors import ProxyError

# Chat finish_reason -> Anthropic stop_reason.
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def stop_reason(finish_reason: str | None, has_tool_use: bool, stop_sequence: str | None = None) -> str:
    """Anthropic stop_reason for a chat finish_reason."""
    if finish_reason == "length":
        return "max_tokens"
    if has_tool_use:
        return "tool_use"
    if stop_sequence is not None:
        return "stop_sequence"
    return _STOP_REASONS.get(finish_reason or "stop", "end_turn")


def matched_stop_sequence(choice: dict[str, Any], req: DecodedRequest) -> str | None:
    """The client's stop sequence that ended the choice (vLLM reports the matched string as `stop_reason`)."""
    matched = choice.get("stop_reason")
    if isinstance(matched, str) and matched in (req.options.get("stop_sequences") or ()):
        return matched
    return None


def usage(chat_usage: dict[str, Any] | None) -> dict[str, int]:
    """Anthropic usage for a chat usage object."""
    chat_usage = chat_usage or {}
    return {
        "input_tokens": int(chat_usage.get("prompt_tokens") or 0),
        "output_tokens": int(chat_usage.get("completion_tokens") or 0),
    }


def message_id(upstream_id: Any) -> str:
    """A message id derived from the engine's completion id (a fresh one when it has none)."""
    return f"msg_{upstream_id}" if upstream_id else f"msg_{uuid.uuid4().hex}"


def new_tool_use_id() -> str:
    """An id for a tool call the engine sent without one."""
    return f"toolu_{uuid.uuid4().hex[:24]}"


def error_type(error: ProxyError) -> str:
    """Anthropic's error type for a proxy error (the SDK picks its exception class by HTTP status)."""
    if error.kind == "invalid_api_key":
        return "authentication_error"
    if error.kind == "payload_too_large":
        return "request_too_large"
    if error.kind == "invalid_request" or (error.kind == "upstream_error" and 400 <= error.status < 500):
        return "invalid_request_error"
    return "api_error"


def error_body(error: ProxyError) -> dict[str, Any]:
    """Anthropic's error JSON (also the data of a stream's `error` event)."""
    return {"type": "error", "error": {"type": error_type(error), "message": error.message}}


def encode_message(upstream: dict[str, Any], req: DecodedRequest) -> dict[str, Any]:
    """A non-streaming chat.completion as an Anthropic `message` (text and tool_use blocks)."""
    choice = (upstream.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or new_tool_use_id(),
                "name": function.get("name", ""),
                "input": tool_input(function.get("arguments") or ""),
            }
        )
    has_tool_use = any(b["type"] == "tool_use" for b in content)
    stop_sequence = matched_stop_sequence(choice, req)
    return {
        "id": message_id(upstream.get("id")),
        "type": "message",
        "role": "assistant",
        "model": req.client_model or upstream.get("model", ""),
        "content": content,
        "stop_reason": stop_reason(choice.get("finish_reason"), has_tool_use, stop_sequence),
        "stop_sequence": stop_sequence,
        "usage": usage(upstream.get("usage")),
    }
