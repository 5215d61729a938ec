"""OpenAI Responses replies: the `response` object (message / function_call / reasoning output items,
usage), shared by the non-streaming reply and every stream event that carries a response."""

from __future__ import annotations

import time
import uuid
from typing import Any

from harness_rl.proxy.dialects.base import DecodedRequest
from harness_rl.proxy.errors import ProxyError

# OpenAI's (type, code) for each proxy error kind.
_ERROR_SHAPES = {
    "invalid_api_key": ("invalid_request_error", "invalid_api_key"),
    "invalid_request": ("invalid_request_error", None),
    "payload_too_large": ("invalid_request_error", "payload_too_large"),
    "upstream_error": ("server_error", "upstream_error"),
}


def new_id(prefix: str) -> str:
    """A fresh id with an OpenAI-style type prefix (resp, msg, fc, rs, call)."""
    return f"{prefix}_{uuid.uuid4().hex}"


def error_body(error: ProxyError) -> dict[str, Any]:
    """OpenAI's error JSON for a proxy error."""
    err_type, code = _ERROR_SHAPES[error.kind]
    return {"error": {"message": error.message, "type": err_type, "param": error.param, "code": code}}


def response_object(
    req: DecodedRequest,
    *,
    response_id: str,
    created_at: float,
    model: str | None,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Responses `response` object (also the payload of created/in_progress/completed events)."""
    opts = req.options
    incomplete = None
    if status == "completed" and finish_reason == "length":
        status, incomplete = "incomplete", {"reason": "max_output_tokens"}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": opts.get("instructions"),
        "max_output_tokens": opts.get("max_output_tokens"),
        "model": req.client_model or model or "",
        "output": output,
        "parallel_tool_calls": opts.get("parallel_tool_calls", True),
        "temperature": opts.get("temperature"),
        "top_p": opts.get("top_p"),
        "tool_choice": opts.get("tool_choice", "auto"),
        "tools": opts.get("tools", []),
        "metadata": opts.get("metadata", {}),
        "store": False,
        "usage": response_usage(usage) if usage is not None else None,
    }


def encode_response(upstream: dict[str, Any], req: DecodedRequest) -> dict[str, Any]:
    """A non-streaming chat.completion as a Responses object."""
    choices = upstream.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        output.append(reasoning_item(new_id("rs"), reasoning, "completed"))
    if isinstance(message.get("content"), str) and message["content"]:
        output.append(message_item(new_id("msg"), message["content"], "completed"))
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function") or {}
        output.append(
            call_item(
                new_id("fc"),
                tc.get("id") or new_id("call"),
                fn.get("name") or "",
                fn.get("arguments") or "",
                "completed",
            )
        )
    return response_object(
        req,
        response_id=response_id_for(upstream),
        created_at=upstream.get("created") or int(time.time()),
        model=upstream.get("model"),
        status="completed",
        output=output,
        usage=upstream.get("usage") or {},
        finish_reason=choice.get("finish_reason"),
    )


def response_id_for(upstream: dict[str, Any]) -> str:
    """A response id derived from the engine's completion id (a fresh one when it has none)."""
    upstream_id = upstream.get("id")
    return f"resp_{upstream_id}" if isinstance(upstream_id, str) and upstream_id else new_id("resp")


def response_usage(chat_usage: dict[str, Any]) -> dict[str, Any]:
    """Responses usage for a chat usage object."""
    prompt = int(chat_usage.get("prompt_tokens") or 0)
    completion = int(chat_usage.get("completion_tokens") or 0)
    cached = (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": int(cached), "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(chat_usage.get("total_tokens") or prompt + completion),
    }


def message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """An assistant message output item; text None while it is only announced (output_item.added)."""
    content = [] if text is None else [text_part(text)]
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def text_part(text: str) -> dict[str, Any]:
    """An output_text content part."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """A reasoning output item; text None while it is only announced."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": item_id, "status": status, "summary": [], "content": content}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    """A function_call output item."""
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }
