"""The one HTTP client the proxy uses to reach the engine (pooled connections, explicit timeouts)."""

from __future__ import annotations

import httpx

CHAT_PATH = "/v1/chat/completions"

# Generation can legitimately take minutes on CPU (long prompts, 40 tokens/s), so reads wait long;
# connecting to a local engine that is up takes milliseconds, so a slow connect means it is down.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=900.0, write=60.0, pool=60.0)
# vLLM's HTTP server closes a connection after 5 s idle (uvicorn's timeout_keep_alive). A pooled connection
# kept longer than that can be picked just as the engine closes it, and the call fails with ReadError('')
# (seen under the 144-session benchmark), so idle connections expire first. Every connection may stay in the
# pool: httpcore 1.0.9 can close a "surplus" idle connection it has just handed to a waiting request
# (encode/httpcore#1110), which a keep-alive limit below the connection limit triggers under load.
DEFAULT_LIMITS = httpx.Limits(max_connections=512, max_keepalive_connections=512, keepalive_expiry=4.0)
# Failures of a pooled connection before the engine answered; the engine keeps no state per request, so
# such a call is sent once more on a fresh connection.
_STALE_CONNECTION_ERRORS = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


# httpcore 1.0.9 scans every connection of a pool, polling each idle socket, for every request it
# assigns: with 144 concurrent streams that scan cost more CPU than relaying the replies. Several small
# pools, used in turn, keep each scan short.
POOL_SHARDS = 16


class Upstream:
    """Lazily created httpx.AsyncClients for the engine at `base_url`, used in turn.

    Created on first use so that they bind to the event loop serving the app; closed by the app's
    lifespan shutdown. `limits` is the total over all pools.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        limits: httpx.Limits = DEFAULT_LIMITS,
        transport: httpx.AsyncBaseTransport | None = None,
        shards: int = POOL_SHARDS,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = timeout
        # A given transport (tests) is one object that each client would close: one pool then.
        self._shards = 1 if transport is not None else max(1, shards)
        per_shard = -(-(limits.max_connections or 512) // self._shards)
        self._limits = httpx.Limits(
            max_connections=per_shard, max_keepalive_connections=per_shard, keepalive_expiry=limits.keepalive_expiry
        )
        self._transport = transport
        self._clients: list[httpx.AsyncClient] = []
        self._next = 0
        # Each client would otherwise load the CA bundle itself (~13 ms apiece, on the first call's clock).
        self._ssl = httpx.create_ssl_context() if self._shards > 1 else True

    @property
    def client(self) -> httpx.AsyncClient:
        """The next pool's client."""
        if not self._clients or any(c.is_closed for c in self._clients):
            self._clients = [
                httpx.AsyncClient(
                    base_url=self.base_url,
                    timeout=self._timeout,
                    limits=self._limits,
                    transport=self._transport,
                    verify=self._ssl,
                    # The engine is local; never pick up a user's HTTP(S)_PROXY for it.
                    trust_env=False,
                )
                for _ in range(self._shards)
            ]
        self._next = (self._next + 1) % len(self._clients)
        return self._clients[self._next]

    async def post_json(self, path: str, body: dict) -> httpx.Response:
        """Non-streaming POST; the response body is read."""
        return await self._send(path, body, stream=False)

    async def open_stream(self, path: str, body: dict) -> httpx.Response:
        """Streaming POST; the caller must `aclose()` the returned response."""
        return await self._send(path, body, stream=True)

    async def _send(self, path: str, body: dict, *, stream: bool) -> httpx.Response:
        client = self.client
        request = client.build_request("POST", path, json=body)
        try:
            return await client.send(request, stream=stream)
        except _STALE_CONNECTION_ERRORS:
            return await client.send(request, stream=stream)

    async def aclose(self) -> None:
        clients, self._clients = self._clients, []
        for client in clients:
            await client.aclose()
