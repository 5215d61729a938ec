"""The real capture proxy in front of the scripted FakeEngine: what ``python -m harness_rl.harnesses check`` and
the harness tests point a harness at, so the harness's own client, dialect and tools run for real while the
model's replies are fixed in advance."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx

from harness_rl.proxy.gatekeeper import ProxyGate
from harness_rl.proxy.server import ProxyServer, UvicornThread
from harness_rl.testkit.fake_vllm import FakeEngine, Reply

ADMIN_TOKEN = "harness-scripted-admin"


class _HoldableApp:
    """ASGI wrapper around the FakeEngine app that can hold chat requests unanswered (an engine that hangs), for
    streaming and non-streaming clients alike.

    A held request never reaches the engine: when the script changes or the proxy closes it is answered 503, so
    it cannot consume a reply meant for a later session.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.hold = False
        self.generation = 0
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.hold and scope.get("path", "").endswith("/chat/completions"):
            generation = self.generation
            # Polled, not awaited on an asyncio primitive: release() and re-scripting come from other threads.
            while not self._released.is_set() and self.generation == generation:
                await asyncio.sleep(0.1)
            await send({"type": "http.response.start", "status": 503, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)


class ScriptedProxy:
    """FakeEngine + ProxyServer on loopback; ``session(replies)`` scripts the engine and opens a rollout session.

    Use as a context manager; one instance serves many sessions (one at a time: the script is global).

    Attributes:
        engine: The scripted engine; ``engine.requests`` holds the upstream bodies the proxy sent it.
        admin_token: The proxy's admin token (for ``ProxyAdmin``).
    """

    def __init__(self, safety_gate: ProxyGate | None = None) -> None:
        self.engine = FakeEngine()
        self.safety_gate = safety_gate
        self.admin_token = ADMIN_TOKEN
        self._app = _HoldableApp(self.engine.app)
        self._engine_server = UvicornThread(self._app)
        self._proxy: ProxyServer | None = None
        self._admin: httpx.Client | None = None

    def __enter__(self) -> ScriptedProxy:
        self._engine_server.start()
        try:
            self._proxy = ProxyServer(
                self._engine_server.url, ADMIN_TOKEN, base_model="base-model", safety_gate=self.safety_gate
            ).start()
        except BaseException:
            self._engine_server.stop()
            raise
        self._admin = httpx.Client(
            base_url=self._proxy.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, trust_env=False
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._app.release()  # held requests finish, so the servers can stop without waiting for them
        if self._admin is not None:
            self._admin.close()
        if self._proxy is not None:
            self._proxy.stop()
        self._engine_server.stop()

    @property
    def url(self) -> str:
        """The proxy's root URL (``http://127.0.0.1:PORT``), for ``ProxyAdmin``."""
        assert self._proxy is not None, "use ScriptedProxy as a context manager"
        return self._proxy.url

    @property
    def base_url(self) -> str:
        """The proxy's OpenAI-style base URL (``http://127.0.0.1:PORT/v1``), what harnesses get."""
        return f"{self.url}/v1"

    def session(
        self,
        replies: list[Reply],
        *,
        max_requests: int | None = 20,
        hang: bool = False,
        safety: dict[str, Any] | None = None,
        **behaviour: Any,
    ) -> str:
        """Resets the engine's script (and ``FakeEngine.reset`` behaviour) and registers a training session.

        Args:
            replies: The engine's replies in order (then it answers "ok").
            max_requests: The session's request budget (None: unlimited).
            hang: Hold every engine request unanswered (a hung engine) until the next script or the close.
            safety: The session's safety spec (see proxy/admin.py); needs a ``safety_gate`` on the proxy.
            **behaviour: Further ``FakeEngine.reset`` arguments (``chunk_delay_s``, ``status``, ...).

        Returns:
            The session key, which the harness uses as its API key.
        """
        assert self._admin is not None, "use ScriptedProxy as a context manager"
        self.script(replies, hang=hang, **behaviour)
        spec = {"adapter": None, "purpose": "train", "max_requests": max_requests, "safety": safety}
        resp = self._admin.post("/admin/sessions", json=spec)
        if resp.status_code != 201:
            raise RuntimeError(f"the proxy refused a session: {resp.status_code} {resp.text[:300]}")
        return resp.json()["key"]

    def script(self, replies: list[Reply], *, hang: bool = False, **behaviour: Any) -> None:
        """Replaces the engine's script without opening a session (for callers that open their own through
        ``ProxyAdmin``); arguments as for ``session``. Requests still held from an earlier script end (503)."""
        self.engine.reset(replies, **behaviour)
        self._app.generation += 1
        self._app.hold = hang

    def trace(self, key: str) -> dict[str, Any]:
        """The session's trace (requests, failures, nodes, sequences)."""
        assert self._admin is not None, "use ScriptedProxy as a context manager"
        resp = self._admin.get(f"/admin/sessions/{key}/trace")
        if resp.status_code != 200:
            raise RuntimeError(f"the proxy refused the trace: {resp.status_code} {resp.text[:300]}")
        return resp.json()


def shell_then_done(tool: str, argument: str, command: str = "echo hello > out.txt") -> list[Reply]:
    """One call of the harness's shell tool running ``command``, then a plain final answer."""
    return [Reply(tool_calls=[(tool, {argument: command})]), Reply(text="Done: out.txt written.")]


def bash_block_then_submit(command: str = "echo hello > out.txt") -> list[Reply]:
    """The text-mode equivalent for mini-swe-agent: a ```bash block, then mini's submit command."""
    return [
        Reply(text=f"I will run it.\n```bash\n{command}\n```"),
        Reply(text="```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"),
    ]
