"""Google generateContent (`POST /{version}/models/{model}:generateContent` and `:streamGenerateContent`).

Served to gemini-cli (v1beta) and the google-genai SDK (any api_version, e.g. v1 with a custom base URL).
Requests are normalized to chat completions by google_request.py; this module encodes the replies.

Streaming is always server-sent events (`?alt=sse`, what both clients ask for): text deltas as they
arrive, function calls once complete, and a last event with finishReason and usageMetadata.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from starlette.requests import Request

from harness_rl.proxy.dialects.base import DecodedRequest, Dialect, sse
from harness_rl.proxy.dialects.google_request import decode_generate_request, normalize_schema, tool_call_id
from harness_rl.proxy.errors import ProxyError
from harness_rl.proxy.request_fields import GOOGLE_GENERATE_FIELDS

__all__ = ["GoogleGenerateContent", "normalize_schema", "tool_call_id"]

_FINISH_REASONS = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class GoogleGenerateContent(Dialect):
    name = "google_generate"
    upstream_fields = GOOGLE_GENERATE_FIELDS
    # One route for both actions: the action after the ':' is how the codec learns whether to stream.
    routes = (("/{version}/models/{model_action}", ("POST",)),)

    def api_key(self, request: Request) -> str | None:
        key = request.headers.get("x-goog-api-key") or request.query_params.get("key")
        if key and key.strip():
            return key.strip()
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        return None

    def decode_request(self, body: Any, path_params: dict[str, Any]) -> DecodedRequest:
        return decode_generate_request(body, path_params)

    def encode_response(self, upstream: dict[str, Any], req: DecodedRequest) -> dict[str, Any]:
        choices = upstream.get("choices") or [{}]
        message = choices[0].get("message") or {}
        parts = _function_call_parts(message.get("tool_calls") or [])
        if message.get("content"):
            parts.insert(0, {"text": message["content"]})
        candidate = {
            "content": {"role": "model", "parts": parts or [{"text": ""}]},
            "finishReason": _finish_reason(choices[0].get("finish_reason")),
            "index": 0,
        }
        return self._response([candidate], upstream, req, upstream.get("usage"))

    @staticmethod
    def _response(
        candidates: list[dict[str, Any]],
        upstream: dict[str, Any],
        req: DecodedRequest,
        usage: dict[str, Any] | None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"candidates": candidates}
        if usage:
            out["usageMetadata"] = {
                "promptTokenCount": usage.get("prompt_tokens", 0),
                "candidatesTokenCount": usage.get("completion_tokens", 0),
                "totalTokenCount": usage.get("total_tokens", 0),
            }
        out["modelVersion"] = req.client_model or upstream.get("model")
        if upstream.get("id"):
            out["responseId"] = upstream["id"]
        return out

    def stream_encoder(self, req: DecodedRequest) -> _GoogleStreamEncoder:
        return _GoogleStreamEncoder(self, req)

    def error_body(self, error: ProxyError) -> dict[str, Any]:
        status = _STATUS_NAMES.get(error.status, "INVALID_ARGUMENT" if error.status < 500 else "INTERNAL")
        return {"error": {"code": error.status, "message": error.message, "status": status}}


def _finish_reason(reason: str | None) -> str:
    return _FINISH_REASONS.get(reason or "stop", "OTHER")


def _function_call_parts(tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    parts = []
    for call in tool_calls:
        function = call.get("function") or {}
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError:
            args = {}
        call_part: dict[str, Any] = {"name": function.get("name") or "", "args": args if isinstance(args, dict) else {}}
        if call.get("id"):
            call_part["id"] = call["id"]
        parts.append({"functionCall": call_part})
    return parts


class _GoogleStreamEncoder:
    """Text deltas as they arrive; tool calls gathered and sent with finishReason and usage at the end."""

    def __init__(self, dialect: GoogleGenerateContent, req: DecodedRequest) -> None:
        self._dialect = dialect
        self._req = req
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._finished = False
        self._upstream: dict[str, Any] = {"id": f"resp-{uuid.uuid4().hex}"}

    def _event(self, parts: list[dict[str, Any]], finish: str | None, usage: dict[str, Any] | None) -> bytes:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}} if parts else {}
        candidate["index"] = 0
        if finish is not None:
            candidate["finishReason"] = _finish_reason(finish)
        return sse(self._dialect._response([candidate], self._upstream, self._req, usage))

    def on_chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        if chunk.get("id"):
            self._upstream["id"] = chunk["id"]
        if chunk.get("model"):
            self._upstream["model"] = chunk["model"]
        events = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                events.append(self._event([{"text": delta["content"]}], None, None))
            for tc in delta.get("tool_calls") or []:
                slot = self._calls.setdefault(tc.get("index", len(self._calls)), {"function": {"arguments": ""}})
                if tc.get("id"):
                    slot["id"] = tc["id"]
                function = tc.get("function") or {}
                if function.get("name"):
                    slot["function"]["name"] = function["name"]
                slot["function"]["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        if chunk.get("usage") and not chunk.get("choices"):
            events += self._final(chunk["usage"])
        return events

    def _final(self, usage: dict[str, Any] | None) -> list[bytes]:
        if self._finished:
            return []
        self._finished = True
        calls = [self._calls[i] for i in sorted(self._calls)]
        return [self._event(_function_call_parts(calls), self._finish or "stop", usage)]

    def on_error(self, message: str) -> list[bytes]:
        # google-genai raises APIError for a data event that is an {"error": ...} object.
        return [sse(self._dialect.error_body(ProxyError(502, "upstream_error", message)))]

    def on_end(self) -> list[bytes]:
        return self._final(None)
