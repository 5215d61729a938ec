"""Replies the proxy makes itself, in the caller's dialect: shaped as the engine's own chat completion (or its
stream chunks) so each dialect encodes them like any other reply. Used for calls past the request budget and
for a prompt that alone fills the model's context."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from harness_rl.proxy.dialects.base import DecodedRequest, Dialect

# Streams are relayed chunk by chunk; these headers keep intermediaries from buffering them.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def proxy_reply(dialect: Dialect, req: DecodedRequest, model: str, text: str, finish_reason: str) -> Response:
    """A reply the proxy makes itself (request budget, full context), streamed or not as the client asked."""
    if not req.stream:
        return JSONResponse(dialect.encode_response(_budget_completion(model, text, finish_reason), req))
    encoder = dialect.stream_encoder(req)

    async def events() -> AsyncIterator[bytes]:
        for chunk in _budget_chunks(model, text, finish_reason):
            for event in encoder.on_chunk(chunk):
                yield event
        for event in encoder.on_end():
            yield event

    return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)


def _budget_completion(model: str, text: str, finish_reason: str = "stop") -> dict[str, Any]:
    """A chat.completion as the engine would send it, for a reply the engine never made."""
    return {
        "id": f"chatcmpl-budget-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def _budget_chunks(model: str, text: str, finish_reason: str = "stop") -> list[dict[str, Any]]:
    base = {
        "id": f"chatcmpl-budget-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    deltas = [
        ({"role": "assistant", "content": ""}, None),
        ({"content": text}, None),
        ({}, finish_reason),
    ]
    chunks = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": f}]} for d, f in deltas]
    chunks.append({**base, "choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})
    return chunks
