"""OpenAI Responses (`POST /v1/responses`), the dialect codex speaks.

Decoding (responses_request.py) turns the `input` item list into chat messages; encoding builds a Responses
object (responses_reply.py) or, when streaming, the full event sequence codex insists on
(responses_stream.py). The proxy is stateless: `previous_response_id` is refused.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from harness_rl.proxy.dialects.base import DecodedRequest, Dialect
from harness_rl.proxy.dialects.openai_chat import bearer_token
from harness_rl.proxy.dialects.responses_reply import encode_response, error_body, response_object
from harness_rl.proxy.dialects.responses_request import decode_responses_request
from harness_rl.proxy.dialects.responses_stream import ResponsesStreamEncoder
from harness_rl.proxy.errors import ProxyError
from harness_rl.proxy.request_fields import OPENAI_RESPONSES_FIELDS

__all__ = ["OpenAIResponses", "ResponsesStreamEncoder", "response_object"]


class OpenAIResponses(Dialect):
    name = "openai_responses"
    upstream_fields = OPENAI_RESPONSES_FIELDS
    routes = (("/v1/responses", ("POST",)),)

    def api_key(self, request: Request) -> str | None:
        return bearer_token(request)

    def decode_request(self, body: Any, path_params: dict[str, Any]) -> DecodedRequest:
        return decode_responses_request(body)

    def encode_response(self, upstream: dict[str, Any], req: DecodedRequest) -> dict[str, Any]:
        return encode_response(upstream, req)

    def stream_encoder(self, req: DecodedRequest) -> ResponsesStreamEncoder:
        return ResponsesStreamEncoder(req)

    def error_body(self, error: ProxyError) -> dict[str, Any]:
        return error_body(error)
