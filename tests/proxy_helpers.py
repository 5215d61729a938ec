"""Helpers shared by the proxy tests: the admin API, and a transport that records what the engine sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness_rl.proxy.server import ProxyServer, UvicornThread
from harness_rl.rollout.proxy_admin import ProxyAdmin
from harness_rl.testkit.fake_vllm import FakeEngine


def new_session(admin: httpx.Client, **spec: Any) -> str:
    """Register a training session (budget 10 unless overridden) and return its key."""
    resp = admin.post("/admin/sessions", json={"adapter": None, "purpose": "train", "max_requests": 10, **spec})
    assert resp.status_code == 201, resp.text
    return resp.json()["key"]


def trace(admin: httpx.Client, key: str) -> dict[str, Any]:
    """The session's rollout graph and training sequences."""
    resp = admin.get(f"/admin/sessions/{key}/trace")
    assert resp.status_code == 200, resp.text
    return resp.json()


@dataclass
class EngineReply:
    """What the engine sent back for one call, read from the raw bytes between proxy and engine."""

    request: dict[str, Any]
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    content: str
    tool_calls: list[dict[str, str]]  # [{"id", "name", "arguments"}], arguments as the engine's JSON text
    finish_reason: str | None
    content_chunks: int  # stream chunks that carried text (1 for a non-streaming reply with text)


@dataclass
class Exchange:
    """One proxy -> engine HTTP call as it went over the wire."""

    request: dict[str, Any]
    status: int
    headers: httpx.Headers
    body: bytearray = field(default_factory=bytearray)

    def reply(self) -> EngineReply:
        """Parses the engine's chat-completions reply (JSON or SSE) independently of the proxy's own capture."""
        assert self.status == 200, bytes(self.body)
        assert "content-encoding" not in self.headers  # the bytes below are what the engine sent, undecoded
        if not self.request.get("stream"):
            data = json.loads(self.body)
            choice = data["choices"][0]
            message = choice["message"]
            calls = [_call(tc["id"], tc["function"]) for tc in message.get("tool_calls") or []]
            logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
            content = message.get("content") or ""
            return EngineReply(self.request, data["prompt_token_ids"], choice["token_ids"], logprobs, content,
                               calls, choice["finish_reason"], int(bool(content)))  # fmt: skip
        prompt, ids, logprobs, content, finish, chunks, calls = None, [], [], "", None, 0, {}
        lines = bytes(self.body).decode().splitlines()
        events = [line[len("data:") :].strip() for line in lines if line.startswith("data:")]
        assert events[-1] == "[DONE]"
        for chunk in map(json.loads, events[:-1]):
            prompt = chunk.get("prompt_token_ids") or prompt
            for choice in chunk.get("choices") or []:
                ids += choice.get("token_ids") or []
                logprobs += [entry["logprob"] for entry in (choice.get("logprobs") or {}).get("content") or []]
                finish = choice.get("finish_reason") or finish
                delta = choice.get("delta") or {}
                content += delta.get("content") or ""
                chunks += bool(delta.get("content"))
                for tc in delta.get("tool_calls") or []:
                    slot = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                    slot["id"] += tc.get("id") or ""
                    slot["name"] += (tc.get("function") or {}).get("name") or ""
                    slot["arguments"] += (tc.get("function") or {}).get("arguments") or ""
        return EngineReply(self.request, prompt, ids, logprobs, content, [calls[i] for i in sorted(calls)], finish,
                           chunks)  # fmt: skip


def _call(call_id: str, function: dict[str, Any]) -> dict[str, str]:
    return {"id": call_id, "name": function["name"], "arguments": function["arguments"]}


class RecordingTransport(httpx.AsyncBaseTransport):
    """An httpx transport for the proxy's engine client that forwards to the real engine and keeps every
    request body and the raw response bytes, so a test can check the proxy's capture against the wire.

    Attributes:
        exchanges: every call in the order the proxy sent them; a test may clear it.
    """

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.exchanges: list[Exchange] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        exchange = Exchange(json.loads(request.content), response.status_code, response.headers)
        self.exchanges.append(exchange)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_TeeStream(response.stream, exchange.body),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _TeeStream(httpx.AsyncByteStream):
    """Passes a response body through unchanged while copying it into `sink`."""

    def __init__(self, inner: Any, sink: bytearray) -> None:
        self._inner = inner
        self._sink = sink

    async def __aiter__(self):
        async for chunk in self._inner:
            self._sink += chunk
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


@contextmanager
def fake_engine_behind_proxy(admin_token: str = "test-admin-token") -> Iterator[tuple[FakeEngine, ProxyAdmin]]:
    """A scripted FakeEngine served over HTTP with a real capture proxy in front: ``(engine, admin client)``."""
    engine = FakeEngine()
    with UvicornThread(engine.app) as engine_server:
        with ProxyServer(engine_server.url, admin_token, base_model="base") as server:
            admin = ProxyAdmin(server.url, admin_token)
            try:
                yield engine, admin
            finally:
                admin.close()
