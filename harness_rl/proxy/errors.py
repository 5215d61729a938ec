"""Errors the proxy answers a client with; each dialect renders them in its own error shape."""

from __future__ import annotations

from typing import Literal

# Dialect-neutral error kinds; dialects map them to their own type/code vocabulary.
ErrorKind = Literal[
    "invalid_api_key",  # unknown or missing session key (401)
    "invalid_request",  # malformed JSON or a request the proxy cannot serve (400)
    "payload_too_large",  # body over max_body_bytes (413)
    "upstream_error",  # engine unreachable or failed (502), or rejected the request (its 4xx)
]


class ProxyError(Exception):
    """A request that ends in an error reply to the client, in the client's dialect."""

    def __init__(self, status: int, kind: ErrorKind, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.param = param
