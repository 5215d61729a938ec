"""The engine client over an httpx transport, for tests: ``create_app(..., upstream=HttpxUpstream(url,
transport=...))`` reaches an in-process engine (an ASGI transport) or records the wire. Production reaches the
engine with aiohttp (proxy/upstream_aiohttp.py); see proxy/upstream.py for the interface both implement."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from harness_rl.proxy.upstream import (
    DEFAULT_TIMEOUT,
    JSON_HEADERS,
    KEEPALIVE_EXPIRY_S,
    MAX_CONNECTIONS,
    Upstream,
    UpstreamError,
    UpstreamStream,
    encode_json,
)

# Failures of a pooled connection before the engine answered; the engine keeps no state per request, so
# such a call is sent once more on a fresh connection.
_STALE_CONNECTION_ERRORS = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
# Every connection may stay in the pool: httpcore 1.0.9 can close a "surplus" idle connection it has just
# handed to a waiting request (encode/httpcore#1110), which a keep-alive limit below the connection limit
# triggers under load.
_LIMITS = httpx.Limits(
    max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS, keepalive_expiry=KEEPALIVE_EXPIRY_S
)


class _HttpxStream(UpstreamStream):
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status_code = response.status_code

    async def aread(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise UpstreamError(repr(exc)) from exc

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._response.aiter_bytes():
                yield part
        except httpx.HTTPError as exc:
            raise UpstreamError(repr(exc)) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxUpstream(Upstream):
    """One httpx.AsyncClient over `transport` (the transport is one object the client closes: one pool)."""

    def __init__(
        self, base_url: str, *, transport: httpx.AsyncBaseTransport, timeout: httpx.Timeout = DEFAULT_TIMEOUT
    ) -> None:
        super().__init__(base_url)
        self._timeout = timeout
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None or self._client.is_closed:
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=self._timeout,
                limits=_LIMITS,
                transport=self._transport,
                # The engine is local; never pick up a user's HTTP(S)_PROXY for it.
                trust_env=False,
            )
        return self._client

    async def post_json(self, path: str, body: dict) -> tuple[int, bytes]:
        response = await self._send("POST", path, encode_json(body), stream=False)
        return response.status_code, response.content

    async def open_stream(self, path: str, body: dict) -> UpstreamStream:
        return _HttpxStream(await self._send("POST", path, encode_json(body), stream=True))

    async def get(self, path: str) -> tuple[int, bytes]:
        response = await self._send("GET", path, None, stream=False)
        return response.status_code, response.content

    async def _send(self, method: str, path: str, content: bytes | None, *, stream: bool) -> httpx.Response:
        client = self.client
        headers = JSON_HEADERS if content is not None else None
        request = client.build_request(method, path, content=content, headers=headers)
        try:
            try:
                return await client.send(request, stream=stream)
            except _STALE_CONNECTION_ERRORS:
                return await client.send(request, stream=stream)
        except httpx.HTTPError as exc:
            raise UpstreamError(repr(exc)) from exc

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
