"""The real capture proxy in front of the scripted FakeEngine, for harness tests (one per test module)."""

from __future__ import annotations

from typing import Any

import httpx

from harness_rl.proxy.fake_engine import FakeEngine, Reply
from harness_rl.proxy.server import ProxyServer, UvicornThread

ADMIN_TOKEN = "harness-test-admin"


class ScriptedProxy:
    """FakeEngine + ProxyServer on loopback; ``session(replies)`` scripts the engine and opens a rollout session.

    Attributes:
        engine: The scripted engine; ``engine.requests`` holds the upstream bodies the proxy sent it.
        base_url: The proxy's OpenAI-style base URL (``http://127.0.0.1:PORT/v1``), what harnesses get.
    """

    def __init__(self) -> None:
        self.engine = FakeEngine()
        self._engine_server = UvicornThread(self.engine.app)
        self._proxy: ProxyServer | None = None
        self._admin: httpx.Client | None = None

    def __enter__(self) -> ScriptedProxy:
        self._engine_server.start()
        self._proxy = ProxyServer(self._engine_server.url, ADMIN_TOKEN, base_model="base-model").start()
        self._admin = httpx.Client(
            base_url=self._proxy.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, trust_env=False
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._admin is not None:
            self._admin.close()
        if self._proxy is not None:
            self._proxy.stop()
        self._engine_server.stop()

    @property
    def base_url(self) -> str:
        assert self._proxy is not None
        return f"{self._proxy.url}/v1"

    def session(self, replies: list[Reply], *, max_requests: int | None = 20, **behaviour: Any) -> str:
        """Resets the engine's script (and ``FakeEngine.reset`` behaviour) and registers a training session.

        Returns:
            The session key, which the harness uses as its API key.
        """
        assert self._admin is not None
        self.engine.reset(replies, **behaviour)
        resp = self._admin.post(
            "/admin/sessions", json={"adapter": None, "purpose": "train", "max_requests": max_requests}
        )
        assert resp.status_code == 201, resp.text
        return resp.json()["key"]

    def trace(self, key: str) -> dict[str, Any]:
        """The session's trace (requests, failures, nodes, sequences)."""
        assert self._admin is not None
        resp = self._admin.get(f"/admin/sessions/{key}/trace")
        assert resp.status_code == 200, resp.text
        return resp.json()


def shell_then_done(tool: str, argument: str, command: str = "echo hello > out.txt") -> list[Reply]:
    """The script every harness test uses: one call of the harness's shell tool, then a plain final answer."""
    return [Reply(tool_calls=[(tool, {argument: command})]), Reply(text="Done: out.txt written.")]
