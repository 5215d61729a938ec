"""The proxy's client for the engine: one interface over two HTTP libraries, with one error type.

The proxy's own engine calls go through aiohttp (proxy/upstream_aiohttp.py): per call it costs about a
quarter of httpx's CPU (measured 0.12 ms against 0.50 ms on the benchmark's engine), and at 144 concurrent
streams the HTTP client was a large share of the proxy's time. Tests that reach an in-process engine or record
the wire hand the app the same interface over an httpx transport (harness_rl/testkit/httpx_upstream.py).
Both map every transport failure to UpstreamError and send a call once more when a pooled keep-alive
connection turns out to be closed before the engine answered.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any

import httpx

from harness_rl.proxy import fast_json

CHAT_PATH = "/v1/chat/completions"

# Generation can legitimately take minutes on CPU (long prompts, 40 tokens/s), so reads wait long;
# connecting to a local engine that is up takes milliseconds, so a slow connect means it is down.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=900.0, write=60.0, pool=60.0)
# Concurrent engine connections; each client call holds one for its duration.
MAX_CONNECTIONS = 512
# vLLM's HTTP server closes a connection after 5 s idle (uvicorn's timeout_keep_alive). A pooled connection
# kept longer than that can be picked just as the engine closes it, and the call fails before any answer
# (seen under the 144-session benchmark), so idle connections expire first.
KEEPALIVE_EXPIRY_S = 4.0

JSON_HEADERS = {"Content-Type": "application/json"}


def encode_json(body: Any) -> bytes:
    """The request body bytes both implementations send: compact UTF-8 JSON (the codecs have already refused
    NaN and replaced lone surrogates, see dialects/wire_json.py)."""
    return fast_json.dumps(body)


class UpstreamError(Exception):
    """The engine could not be reached, or its connection failed before or while it answered."""


class UpstreamStream(ABC):
    """An engine reply whose headers have arrived and whose body is read as it comes."""

    status_code: int

    @abstractmethod
    async def aread(self) -> bytes:
        """The whole (remaining) body. Raises UpstreamError if the connection fails."""

    @abstractmethod
    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body, one piece per network read. Raises UpstreamError if the connection fails."""

    @abstractmethod
    async def aclose(self) -> None:
        """Releases the connection (closing it when the body was not read to the end); idempotent."""


class Upstream(ABC):
    """The engine at `base_url`: pooled connections, created on first use so that they bind to the event
    loop serving the app, and closed by the app's lifespan shutdown."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    @abstractmethod
    async def post_json(self, path: str, body: dict) -> tuple[int, bytes]:
        """Non-streaming POST of `body` as JSON; returns the status and the whole response body.

        Raises:
            UpstreamError: the engine is unreachable or the connection failed.
        """

    @abstractmethod
    async def open_stream(self, path: str, body: dict) -> UpstreamStream:
        """Streaming POST; the caller must `aclose()` the returned reply.

        Raises:
            UpstreamError: the engine is unreachable or the connection failed before the headers.
        """

    @abstractmethod
    async def get(self, path: str) -> tuple[int, bytes]:
        """GET; returns the status and the whole response body. Raises UpstreamError like post_json."""

    @abstractmethod
    async def aclose(self) -> None:
        """Closes the pooled connections."""
