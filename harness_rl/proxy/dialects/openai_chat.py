"""OpenAI Chat Completions (`POST /v1/chat/completions`), the engine's own dialect.

Decoding is nearly the identity; encoding strips what vLLM adds for tracing (prompt/completion token
ids, log-probs the client did not ask for) and echoes the client's model name, so the harness sees an
ordinary OpenAI reply.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from harness_rl.proxy import fast_json
from harness_rl.proxy.dialects.base import DecodedRequest, Dialect, sse
from harness_rl.proxy.dialects.wire_json import check_json_body
from harness_rl.proxy.errors import ProxyError
from harness_rl.proxy.request_fields import OPENAI_CHAT_FIELDS

_RESPONSE_KEYS = (
    "id",
    "object",
    "created",
    "model",
    "choices",
    "usage",
    "system_fingerprint",
    "service_tier",
)
_CHOICE_KEYS = ("index", "message", "delta", "logprobs", "finish_reason")


# OpenAI's (type, code) for each proxy error kind.
_ERROR_SHAPES = {
    "invalid_api_key": ("invalid_request_error", "invalid_api_key"),
    "invalid_request": ("invalid_request_error", None),
    "payload_too_large": ("invalid_request_error", "payload_too_large"),
    "upstream_error": ("server_error", "upstream_error"),
}


def bearer_token(request: Request) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, None when absent."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _bad(message: str, param: str) -> ProxyError:
    return ProxyError(400, "invalid_request", message, param=param)


class OpenAIChat(Dialect):
    name = "openai_chat"
    upstream_fields = OPENAI_CHAT_FIELDS
    routes = (("/v1/chat/completions", ("POST",)),)

    def api_key(self, request: Request) -> str | None:
        return bearer_token(request)

    def decode_request(self, body: Any, path_params: dict[str, Any]) -> DecodedRequest:
        body = check_json_body(body)
        if not isinstance(body, dict):
            raise _bad("request body must be a JSON object", "body")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _bad("'messages' must be a non-empty list", "messages")
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise _bad(f"messages[{i}] must be an object with a 'role'", f"messages[{i}]")
        stream = body.get("stream") or False
        if not isinstance(stream, bool):
            raise _bad("'stream' must be a boolean", "stream")
        if body.get("n") not in (None, 1):
            raise _bad("only n=1 is supported (one sampled completion per call)", "n")
        for name in ("max_tokens", "max_completion_tokens"):
            # The sampling policy compares these with the session's cap; anything but an integer would fail
            # there instead of naming the field.
            value = body.get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise _bad(f"'{name}' must be an integer", name)
        stream_options = body.get("stream_options") or {}
        if not isinstance(stream_options, dict):
            raise _bad("'stream_options' must be an object", "stream_options")
        model = body.get("model")
        # A shallow copy: the relay and the sampling policy replace top-level fields and never edit nested
        # ones in place (a deep copy of a long conversation was a third of the proxy's time per call).
        upstream = dict(body)
        upstream.pop("n", None)
        return DecodedRequest(
            upstream_body=upstream,
            stream=stream,
            client_model=model if isinstance(model, str) else None,
            options={
                "include_usage": bool(stream_options.get("include_usage")),
                "logprobs": bool(body.get("logprobs")),
                "hide_reasoning": body.get("include_reasoning") is False,
            },
        )

    def encode_response(self, upstream: dict[str, Any], req: DecodedRequest) -> dict[str, Any]:
        out = {k: upstream[k] for k in _RESPONSE_KEYS if k in upstream}
        out["choices"] = [self._clean_choice(c, req) for c in upstream.get("choices") or []]
        if req.client_model:
            out["model"] = req.client_model
        return out

    def _clean_choice(self, choice: dict[str, Any], req: DecodedRequest) -> dict[str, Any]:
        out = {k: choice[k] for k in _CHOICE_KEYS if k in choice}
        if not req.options.get("logprobs"):
            out.pop("logprobs", None)
        if req.options.get("hide_reasoning"):
            for part in ("message", "delta"):
                if isinstance(out.get(part), dict):
                    out[part] = {k: v for k, v in out[part].items() if k not in ("reasoning", "reasoning_content")}
        return out

    def stream_encoder(self, req: DecodedRequest) -> _ChatStreamEncoder:
        return _ChatStreamEncoder(self, req)

    def error_body(self, error: ProxyError) -> dict[str, Any]:
        err_type, code = _ERROR_SHAPES[error.kind]
        return {"error": {"message": error.message, "type": err_type, "param": error.param, "code": code}}


class _ChatStreamEncoder:
    """Relays chunks one by one, minus tracing fields; drops chunks left empty by that."""

    def __init__(self, dialect: OpenAIChat, req: DecodedRequest) -> None:
        self._dialect = dialect
        self._req = req
        self._include_usage = bool(req.options.get("include_usage"))
        self._logprobs = bool(req.options.get("logprobs"))

    def on_chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        choices = chunk.get("choices") or []
        if not choices:
            # The trailing usage chunk: the relay always asks the engine for it (the trace needs usage),
            # the client gets it only if it asked.
            if chunk.get("usage") and self._include_usage:
                return [_sse_event(self._dialect.encode_response(chunk, self._req))]
            return []
        out = self._dialect.encode_response(chunk, self._req)
        if not self._include_usage:
            out.pop("usage", None)
        # vLLM sends a chunk for every sampled step, even while its tool parser holds text back; without
        # the token ids such a chunk says nothing to the client.
        for c in out["choices"]:
            if c.get("delta") or c.get("finish_reason") or (self._logprobs and c.get("logprobs")):
                return [_sse_event(out)]
        return []

    def on_error(self, message: str) -> list[bytes]:
        # The openai SDKs raise APIError on a data event carrying an "error" object.
        error = ProxyError(502, "upstream_error", message)
        return [sse(self._dialect.error_body(error)), sse("[DONE]")]

    def on_end(self) -> list[bytes]:
        return [sse("[DONE]")]


def _sse_event(data: dict[str, Any]) -> bytes:
    """One event, as dialects.base.sse(data) writes it but through msgspec: this runs per streamed token."""
    return b"data: " + fast_json.dumps(data) + b"\n\n"
