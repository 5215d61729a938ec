"""The one HTTP client the proxy uses to reach the engine (pooled connections, explicit timeouts)."""

from __future__ import annotations

import httpx

CHAT_PATH = "/v1/chat/completions"

# Generation can legitimately take minutes on CPU (long prompts, 40 tokens/s), so reads wait long;
# connecting to a local engine that is up takes milliseconds, so a slow connect means it is down.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=900.0, write=60.0, pool=60.0)
DEFAULT_LIMITS = httpx.Limits(max_connections=512, max_keepalive_connections=128, keepalive_expiry=30.0)


class Upstream:
    """Lazily created shared httpx.AsyncClient for the engine at `base_url`.

    Created on first use so that it binds to the event loop serving the app; closed by the app's
    lifespan shutdown.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        limits: httpx.Limits = DEFAULT_LIMITS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = timeout
        self._limits = limits
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None or self._client.is_closed:
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=self._timeout,
                limits=self._limits,
                transport=self._transport,
                # The engine is local; never pick up a user's HTTP(S)_PROXY for it.
                trust_env=False,
            )
        return self._client

    async def post_json(self, path: str, body: dict) -> httpx.Response:
        """Non-streaming POST; the response body is read."""
        return await self.client.post(path, json=body)

    async def open_stream(self, path: str, body: dict) -> httpx.Response:
        """Streaming POST; the caller must `aclose()` the returned response."""
        request = self.client.build_request("POST", path, json=body)
        return await self.client.send(request, stream=True)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
