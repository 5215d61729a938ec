"""The benchmark's load generator: agent-like sessions whose context grows turn by turn.

Each session starts from a system prompt and a task; every turn sends the whole conversation, then appends
the assistant's reply (text plus one tool call) and a tool result, as a coding agent does. A session runs
either directly against the engine or through the proxy:

- direct: the client asks the engine for exactly what the proxy would ask for (token ids, log-probs, the
  usage chunk), so both paths cost the engine the same and the difference is the proxy alone;
- proxy: the session is registered through the admin API, its key is the API key, and at the end its trace
  is fetched, checked (one node per call, each linked to the previous one) and the session DELETEd.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness_rl.testkit.fake_vllm.fast import REPLY_VOCAB

CHAT = "/v1/chat/completions"
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run one shell command in the repository and return its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}


@dataclass(frozen=True)
class SessionShape:
    """How big an agent session is: turns, and words (= tokens) of each kind of message."""

    turns: int = 20
    system_words: int = 400
    task_words: int = 60
    tool_words: int = 150


@dataclass
class CallRecord:
    """One model call as the client saw it."""

    latency_s: float
    ttft_s: float | None  # streaming only: until the first chunk with text


@dataclass
class Target:
    """Where sessions send their calls: the engine directly, or the proxy (with its admin token)."""

    name: str
    base_url: str
    model: str
    admin_token: str | None = None

    def new_client(self) -> httpx.AsyncClient:
        """One client with one connection per session, as each harness process has its own.

        A shared pool would cost the load generator more than the servers: httpcore 1.0.9 scans every
        request and connection of a pool on each request, so 144 sessions on one pool saturate its core.
        """
        # No client-side idle expiry: httpcore can close an expired connection it has just handed to a
        # waiting request (encode/httpcore#1110); connections the server closed are detected on reuse.
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=None)
        return httpx.AsyncClient(base_url=self.base_url, limits=limits, timeout=300.0, trust_env=False)

    @property
    def proxied(self) -> bool:
        return self.admin_token is not None


# What a request on a pooled connection that the server closed meanwhile fails with, before any answer.
_STALE_ERRORS = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


class _StaleConnection(Exception):
    """The call failed on a stale pooled connection before the server answered (safe to send again)."""


class BenchError(RuntimeError):
    """A call or trace the benchmark cannot count (it would make the numbers meaningless)."""


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(REPLY_VOCAB, k=n))


@dataclass
class AgentSession:
    """One agent conversation against one target; `step()` runs one turn."""

    target: Target
    shape: SessionShape
    stream: bool
    seed: int
    records: list[CallRecord] = field(default_factory=list)
    key: str | None = None
    retries: int = 0
    client: httpx.AsyncClient | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)

    async def start(self) -> None:
        self.client = self.target.new_client()
        rng = random.Random(self.seed)
        self.messages = [
            {"role": "system", "content": _words(rng, self.shape.system_words)},
            {"role": "user", "content": _words(rng, self.shape.task_words)},
        ]
        if self.target.proxied:
            resp = await self.client.post(
                "/admin/sessions",
                json={"adapter": None, "purpose": "train", "max_requests": None},
                headers=self._admin_headers(),
            )
            _expect(resp, 201)
            self.key = resp.json()["key"]

    async def step(self) -> None:
        body: dict[str, Any] = {"model": self.target.model, "messages": self.messages, "tools": [BASH_TOOL]}
        headers = {}
        if self.target.proxied:
            headers["Authorization"] = f"Bearer {self.key}"
        else:  # what the proxy adds for the engine
            body.update(return_token_ids=True, logprobs=True)
        if self.stream:
            body["stream"] = True
            if not self.target.proxied:
                body["stream_options"] = {"include_usage": True}
        call = self._call_streaming if self.stream else self._call
        try:
            content, tool_calls = await call(body, headers)
        except _StaleConnection:
            # A pooled connection the server closed just as it was reused; nothing was answered yet.
            self.retries += 1
            content, tool_calls = await call(body, headers)
        if not tool_calls:
            raise BenchError(f"{self.target.name}: reply without a tool call")
        rng = random.Random(self.seed * 1_000 + len(self.messages))
        self.messages = self.messages + [
            {"role": "assistant", "content": content, "tool_calls": tool_calls},
            {"role": "tool", "tool_call_id": tool_calls[0]["id"], "content": _words(rng, self.shape.tool_words)},
        ]

    async def finish(self) -> None:
        """Fetches and checks the trace, then ends the session (which frees it in the proxy)."""
        if self.target.proxied:
            await self.fetch_trace()
        await self.end()

    async def fetch_trace(self) -> dict[str, Any]:
        """The session's trace, checked: one node per call, each linked to the call before it."""
        resp = await self.client.get(f"/admin/sessions/{self.key}/trace", headers=self._admin_headers())
        _expect(resp, 200)
        trace = resp.json()
        nodes = trace["nodes"]
        if len(nodes) != len(self.records) or trace["failures"]:
            raise BenchError(f"trace has {len(nodes)} nodes for {len(self.records)} calls: {trace['failures']}")
        if [n["parent"] for n in nodes] != [None, *range(len(nodes) - 1)]:
            raise BenchError(f"calls not linked into one chain: {[n['parent'] for n in nodes]}")
        return trace

    async def end(self) -> None:
        """DELETEs the session (the proxy forgets it and frees its memory) and closes the session's client."""
        if self.target.proxied:
            _expect(await self.client.delete(f"/admin/sessions/{self.key}", headers=self._admin_headers()), 200)
        await self.client.aclose()

    async def run(self, on_call: Callable[[], None] | None = None) -> None:
        await self.start()
        for _ in range(self.shape.turns):
            await self.step()
            if on_call is not None:
                on_call()
        await self.finish()

    def _admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.target.admin_token}"}

    async def _call(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[str, list[dict[str, Any]]]:
        t0 = time.perf_counter()
        try:
            resp = await self.client.post(CHAT, json=body, headers=headers)
        except _STALE_ERRORS as exc:
            raise _StaleConnection() from exc
        _expect(resp, 200)
        message = resp.json()["choices"][0]["message"]
        self.records.append(CallRecord(latency_s=time.perf_counter() - t0, ttft_s=None))
        return message.get("content") or "", message.get("tool_calls") or []

    async def _call_streaming(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[str, list[dict[str, Any]]]:
        t0 = time.perf_counter()
        ttft = None
        content: list[str] = []
        tool_calls: dict[int, dict[str, Any]] = {}
        done = False
        request = self.client.build_request("POST", CHAT, json=body, headers=headers)
        try:
            resp = await self.client.send(request, stream=True)
        except _STALE_ERRORS as exc:
            raise _StaleConnection() from exc
        try:
            if resp.status_code != 200:
                await resp.aread()
                _expect(resp, 200)
            buffer = b""
            async for part in resp.aiter_bytes():
                buffer += part
                *events, buffer = buffer.split(b"\n\n")
                for event in events:
                    if not event.startswith(b"data: "):
                        continue
                    data = event[6:]
                    if data == b"[DONE]":
                        done = True
                        continue
                    chunk = json.loads(data)
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        if delta.get("content"):
                            if ttft is None:
                                ttft = time.perf_counter() - t0
                            content.append(delta["content"])
                        for tc in delta.get("tool_calls") or ():
                            slot = tool_calls.setdefault(
                                tc.get("index", 0),
                                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                            )
                            slot["id"] = tc.get("id") or slot["id"]
                            slot["function"]["name"] += (tc.get("function") or {}).get("name") or ""
                            slot["function"]["arguments"] += (tc.get("function") or {}).get("arguments") or ""
        finally:
            await resp.aclose()
        if not done:
            raise BenchError(f"{self.target.name}: stream ended without [DONE]")
        self.records.append(CallRecord(latency_s=time.perf_counter() - t0, ttft_s=ttft))
        return "".join(content), [tool_calls[i] for i in sorted(tool_calls)]


def _expect(resp: httpx.Response, status: int) -> None:
    if resp.status_code != status:
        raise BenchError(f"{resp.request.method} {resp.request.url.path}: HTTP {resp.status_code}: {resp.text[:500]}")
