"""The codec interface one wire dialect implements (one module per dialect under proxy/dialects/).

Every client request is normalized to one vLLM chat-completions request; the engine's reply (or stream of
chat.completion.chunk objects) is converted back. The relay (proxy/relay.py) owns everything that is the
same for all dialects: sessions, budget, sampling policy, token capture, upstream I/O and failures.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.requests import Request

from harness_rl.proxy.errors import ProxyError


@dataclass
class DecodedRequest:
    """A client request normalized for the engine.

    Attributes:
        upstream_body: chat-completions body for vLLM. The relay still sets model, sampling policy,
            return_token_ids/logprobs and stream options.
        stream: whether the client wants a stream.
        client_model: the model name the client asked for (echoed back; the engine model is the session's).
        options: dialect-specific facts the encoder needs later (e.g. whether the client asked for usage).
    """

    upstream_body: dict[str, Any]
    stream: bool
    client_model: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


class StreamEncoder(Protocol):
    """Turns upstream chat.completion.chunk objects into the client's stream events (bytes)."""

    def on_chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        """Called for every upstream chunk, in order, as it arrives."""
        ...

    def on_error(self, message: str) -> list[bytes]:
        """Called once when the upstream fails mid-stream; the stream ends after these events."""
        ...

    def on_end(self) -> list[bytes]:
        """Called once after the last upstream chunk of a successful stream."""
        ...


class Dialect(ABC):
    """One client wire format."""

    name: str
    #: (path, methods) pairs served by this dialect.
    routes: tuple[tuple[str, tuple[str, ...]], ...]
    #: The engine-request fields a training session forwards from this dialect (harness_rl/proxy/request_fields.py);
    #: any other field of ``DecodedRequest.upstream_body`` is stripped before the engine sees it.
    upstream_fields: frozenset[str]

    @abstractmethod
    def api_key(self, request: Request) -> str | None:
        """The session key from the dialect's auth header (or query), None when absent."""

    @abstractmethod
    def decode_request(self, body: Any, path_params: dict[str, Any]) -> DecodedRequest:
        """Validates and normalizes a parsed JSON body. Raises ProxyError(400) naming the bad field.

        Called by the relay for every authenticated request, before it counts against the budget.
        Implementations pass the body through `wire_json.check_json_body` first (NaN, lone surrogates, nesting).
        """

    @abstractmethod
    def encode_response(self, upstream: dict[str, Any], req: DecodedRequest) -> dict[str, Any]:
        """Converts a non-streaming chat.completion reply into the client's reply body."""

    @abstractmethod
    def stream_encoder(self, req: DecodedRequest) -> StreamEncoder:
        """A fresh encoder for one streamed reply."""

    @abstractmethod
    def error_body(self, error: ProxyError) -> dict[str, Any]:
        """The dialect's error JSON for an error."""


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    """One server-sent event."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {payload}\n\n".encode()
