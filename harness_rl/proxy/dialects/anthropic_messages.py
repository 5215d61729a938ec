"""Anthropic Messages (`POST /v1/messages`, also `?beta=true` as claude-code sends it).

A request becomes one chat-completions request (anthropic_request.py), after the tolerance rules in
anthropic_rules.py have removed what the engine cannot take. Replies go back as an Anthropic `message`
(anthropic_reply.py) or as its event stream (anthropic_stream.py).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from harness_rl.proxy.dialects.anthropic_reply import encode_message, error_body, error_type, stop_reason
from harness_rl.proxy.dialects.anthropic_request import (
    RAW_ARGUMENTS_KEY,
    TOOL_ERROR_PREFIX,
    decode_messages_request,
    tool_arguments,
    tool_input,
)
from harness_rl.proxy.dialects.anthropic_rules import (
    BILLING_HEADER_PREFIX,
    drop_betas,
    drop_billing_header,
    drop_context_management,
    drop_deferred_tools,
    drop_metadata,
    drop_output_config,
    drop_schemaless_tools,
    drop_thinking,
    drop_thinking_blocks,
    strip_cache_control,
)
from harness_rl.proxy.dialects.anthropic_stream import MessagesStreamEncoder
from harness_rl.proxy.dialects.base import DecodedRequest, Dialect
from harness_rl.proxy.dialects.openai_chat import bearer_token
from harness_rl.proxy.errors import ProxyError
from harness_rl.proxy.request_fields import ANTHROPIC_MESSAGES_FIELDS

__all__ = [
    "BILLING_HEADER_PREFIX",
    "RAW_ARGUMENTS_KEY",
    "TOOL_ERROR_PREFIX",
    "AnthropicMessages",
    "MessagesStreamEncoder",
    "drop_betas",
    "drop_billing_header",
    "drop_context_management",
    "drop_deferred_tools",
    "drop_metadata",
    "drop_output_config",
    "drop_schemaless_tools",
    "drop_thinking",
    "drop_thinking_blocks",
    "error_type",
    "stop_reason",
    "strip_cache_control",
    "tool_arguments",
    "tool_input",
]


class AnthropicMessages(Dialect):
    name = "anthropic_messages"
    upstream_fields = ANTHROPIC_MESSAGES_FIELDS
    routes = (("/v1/messages", ("POST",)),)

    def api_key(self, request: Request) -> str | None:
        key = request.headers.get("x-api-key", "").strip()
        return key or bearer_token(request)

    def decode_request(self, body: Any, path_params: dict[str, Any]) -> DecodedRequest:
        return decode_messages_request(body)

    def encode_response(self, upstream: dict[str, Any], req: DecodedRequest) -> dict[str, Any]:
        return encode_message(upstream, req)

    def stream_encoder(self, req: DecodedRequest) -> MessagesStreamEncoder:
        return MessagesStreamEncoder(req)

    def error_body(self, error: ProxyError) -> dict[str, Any]:
        return error_body(error)
