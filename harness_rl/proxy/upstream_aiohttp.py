"""The engine client over aiohttp: what the proxy uses against a real engine. See proxy/upstream.py for the
interface and why aiohttp."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
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

# Failures of a connection before the engine answered. A pooled connection the engine closed while it was
# idle fails this way on reuse; the engine keeps no state per request, so the call is sent once more (on a
# fresh connection: aiohttp drops a connection that failed). Failing to connect at all is not retried.
_STALE_CONNECTION_ERRORS = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
_NOT_STALE = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# Everything a request or a body read can fail with (aiohttp's timeouts subclass asyncio.TimeoutError).
_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


class _AiohttpStream(UpstreamStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status

    async def aread(self) -> bytes:
        try:
            return await self._response.read()
        except _TRANSPORT_ERRORS as exc:
            raise UpstreamError(repr(exc)) from exc

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._response.content.iter_any():
                yield part
        except _TRANSPORT_ERRORS as exc:
            raise UpstreamError(repr(exc)) from exc

    async def aclose(self) -> None:
        # Returns the connection to the pool when the body was read to the end, closes it otherwise.
        self._response.release()


class AiohttpUpstream(Upstream):
    """One aiohttp.ClientSession with a connection pool to the engine."""

    def __init__(self, base_url: str, *, timeout: httpx.Timeout = DEFAULT_TIMEOUT) -> None:
        super().__init__(base_url)
        # httpx's pool timeout is aiohttp's `connect` (waiting for a pooled connection, connecting included).
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=timeout.pool, sock_connect=timeout.connect, sock_read=timeout.read
        )
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=MAX_CONNECTIONS, limit_per_host=0, keepalive_timeout=KEEPALIVE_EXPIRY_S
            )
            # trust_env=False (the default): the engine is local; never pick up a user's HTTP(S)_PROXY for it.
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, trust_env=False)
        return self._session

    async def post_json(self, path: str, body: dict) -> tuple[int, bytes]:
        response = await self._request("POST", path, encode_json(body))
        try:
            return response.status, await response.read()
        except _TRANSPORT_ERRORS as exc:
            raise UpstreamError(repr(exc)) from exc
        finally:
            response.release()

    async def open_stream(self, path: str, body: dict) -> UpstreamStream:
        return _AiohttpStream(await self._request("POST", path, encode_json(body)))

    async def get(self, path: str) -> tuple[int, bytes]:
        response = await self._request("GET", path, None)
        try:
            return response.status, await response.read()
        except _TRANSPORT_ERRORS as exc:
            raise UpstreamError(repr(exc)) from exc
        finally:
            response.release()

    async def _request(self, method: str, path: str, data: bytes | None) -> aiohttp.ClientResponse:
        """Sends the request; returns once the response headers arrived."""
        url = self.base_url + path
        headers = JSON_HEADERS if data is not None else None
        session = self.session
        try:
            try:
                return await session.request(method, url, data=data, headers=headers, allow_redirects=False)
            except _NOT_STALE:
                raise
            except _STALE_CONNECTION_ERRORS:
                return await session.request(method, url, data=data, headers=headers, allow_redirects=False)
        except _TRANSPORT_ERRORS as exc:
            raise UpstreamError(repr(exc)) from exc

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
