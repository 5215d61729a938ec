"""Both engine clients (aiohttp for the proxy, httpx over a given transport) send a call once more when the
engine closed the pooled connection the call went out on, and report every transport failure as UpstreamError."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from harness_rl.proxy.upstream import Upstream, UpstreamError
from harness_rl.proxy.upstream_aiohttp import AiohttpUpstream
from harness_rl.testkit.httpx_upstream import HttpxUpstream

REPLY = b'{"ok":true}'


class OneShotEngine:
    """A raw HTTP/1.1 server that answers only the first request of each connection with keep-alive, then
    closes the connection when the next request arrives on it, without answering: the race of an engine that
    closes an idle keep-alive connection just as the proxy reuses it. `truncate` answers with a body shorter
    than its Content-Length and closes (a connection lost mid-reply)."""

    def __init__(self, *, truncate: bool = False) -> None:
        self.truncate = truncate
        self.connections = 0
        self.answered: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> OneShotEngine:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lengths = [int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if b"content-length" in line]
            length = lengths[0] if lengths else 0
            self.answered.append(await reader.readexactly(length))
            if self.truncate:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Type: application/json\r\n\r\n{")
            else:
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                    + f"Content-Length: {len(REPLY)}\r\n\r\n".encode()
                    + REPLY
                )
                await writer.drain()
                await reader.readuntil(b"\r\n\r\n")  # the next request on this connection: dropped unanswered
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def clients(url: str) -> dict[str, Upstream]:
    return {
        "aiohttp": AiohttpUpstream(url),
        "httpx": HttpxUpstream(url, transport=httpx.AsyncHTTPTransport()),
    }


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
def test_call_on_a_connection_the_engine_closed_is_sent_again(kind):
    async def go():
        async with OneShotEngine() as engine:
            upstream = clients(engine.url)[kind]
            try:
                first = await upstream.post_json("/v1/chat/completions", {"n": 1, "text": "é"})
                # Reuses the pooled connection, which the engine drops unanswered; the call goes out again.
                second = await upstream.post_json("/v1/chat/completions", {"n": 2})
                stream = await upstream.open_stream("/v1/chat/completions", {"n": 3})
                streamed = b"".join([part async for part in stream.aiter_bytes()])
                await stream.aclose()
            finally:
                await upstream.aclose()
        assert first == second == (200, REPLY) and streamed == REPLY
        assert [json.loads(body) for body in engine.answered] == [{"n": 1, "text": "é"}, {"n": 2}, {"n": 3}]
        assert engine.connections == 3

    asyncio.run(go())


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
def test_engine_down_is_an_upstream_error(kind):
    async def go():
        upstream = clients("http://127.0.0.1:9")[kind]  # discard port: refused
        try:
            with pytest.raises(UpstreamError):
                await upstream.post_json("/v1/chat/completions", {})
            with pytest.raises(UpstreamError):
                await upstream.open_stream("/v1/chat/completions", {})
            with pytest.raises(UpstreamError):
                await upstream.get("/v1/models")
        finally:
            await upstream.aclose()

    asyncio.run(go())


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
def test_connection_lost_mid_reply_is_an_upstream_error(kind):
    async def go():
        async with OneShotEngine(truncate=True) as engine:
            upstream = clients(engine.url)[kind]
            try:
                stream = await upstream.open_stream("/v1/chat/completions", {})
                assert stream.status_code == 200
                with pytest.raises(UpstreamError):
                    async for _ in stream.aiter_bytes():
                        pass
                await stream.aclose()
                with pytest.raises(UpstreamError):
                    await upstream.post_json("/v1/chat/completions", {})
            finally:
                await upstream.aclose()

    asyncio.run(go())
