"""Rollout sessions: what a session key means to the proxy and what it has recorded so far.

The rollout worker registers one session per harness run (admin API); the harness then uses the session
key as its API key. A session fixes the adapter, the purpose (train/eval), the sampling policy and the
request budget, and accumulates the rollout graph plus any failures (calls that could not be captured
must never vanish silently from training data) and events (what the proxy did about a call that is not a fault:
an output budget clamped to the context, a prompt that no longer fits in it).

It also times the session for the rollout's phase breakdown (rollout/phases.py): when the first call reached the
proxy (``first_request_t``, where the harness's start-up ends) and the intervals the proxy spent waiting on the
engine (``engine_calls``), whose union is ``engine_wait_s`` (a harness with calls in flight at once waits once).
All are wall-clock ``time.time()`` values, like the graph nodes' ``t_start``/``t_end``, so the rollout can line
them up with its own clock.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from harness_rl.proxy.gatekeeper import SessionGate
from harness_rl.proxy.graph import RolloutGraph

log = logging.getLogger(__name__)

Purpose = Literal["train", "eval"]
PURPOSES = ("train", "eval")


@dataclass(frozen=True)
class SamplingPolicy:
    """Session-level sampling overrides; None means "keep what the client sent"."""

    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "max_tokens": self.max_tokens, "top_p": self.top_p}


@dataclass
class Session:
    """One rollout's capture state. Mutated from the proxy's event loop and read from admin calls."""

    key: str
    adapter: str | None
    purpose: Purpose
    sampling: SamplingPolicy
    max_requests: int | None
    client_model: str | None = None
    gate: SessionGate | None = None
    created: float = field(default_factory=time.time)
    requests: int = 0
    #: Engine calls sent and not yet answered (no status line back). Non-zero when the harness was killed means the
    #: engine, not the agent, held the rollout up at that moment (see rollout/session.py).
    awaiting_engine: int = 0
    #: Wall time the session's first call reached the proxy (None: no call yet).
    first_request_t: float | None = None
    #: ``[start, end]`` wall times of each finished engine call (until the reply, or the stream's headers).
    engine_calls: list[list[float]] = field(default_factory=list)
    #: Start times of engine calls still unanswered, by call token (a trace taken meanwhile counts them up to now).
    _open_calls: dict[int, float] = field(default_factory=dict, repr=False)
    failures: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    graph: RolloutGraph = field(default_factory=RolloutGraph)
    #: Request fields outside the dialect's allowlist removed from this session's calls, with how many calls
    #: carried each (training sessions only; see harness_rl/proxy/request_fields.py).
    stripped_fields: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def begin_request(self) -> bool:
        """Counts one client call; returns False when it is past the request budget.

        Every authenticated, well-formed call counts, failed ones included, so a harness that retries on
        errors still runs into the budget.
        """
        with self._lock:
            self.requests += 1
            if self.first_request_t is None:
                self.first_request_t = time.time()
            return self.max_requests is None or self.requests <= self.max_requests

    @contextlib.contextmanager
    def engine_call(self) -> Iterator[None]:
        """Counts a call as awaiting the engine until its reply (or stream headers, or an error) comes back, and
        times it (``engine_calls``)."""
        token = object()
        with self._lock:
            self.awaiting_engine += 1
            self._open_calls[id(token)] = time.time()
        try:
            yield
        finally:
            with self._lock:
                self.awaiting_engine -= 1
                self.engine_calls.append([self._open_calls.pop(id(token)), time.time()])

    def note_stripped(self, names: list[str]) -> None:
        """Counts request fields stripped from one call; the session's first stripping is logged (once, so a harness
        that sends an extra on every call does not flood the log)."""
        if not names:
            return
        with self._lock:
            first = not self.stripped_fields
            for name in names:
                self.stripped_fields[name] = self.stripped_fields.get(name, 0) + 1
        if first:
            log.warning(
                "session %s: stripped request field(s) %s that training sessions never forward to the engine "
                "(counted in the trace's stripped_fields)",
                self.key[:8],
                names,
            )

    def record_failure(self, kind: str, message: str, **details: Any) -> None:
        """Keeps a call the proxy could not capture (or serve) on the session's record."""
        with self._lock:
            self.failures.append({"t": time.time(), "kind": kind, "message": message, **details})

    def record_event(self, kind: str, **details: Any) -> None:
        """Keeps something the proxy did about a call that is part of the attempt, not a fault (e.g.
        ``context_exhausted``: the prompt alone filled the model's context and the proxy answered instead)."""
        with self._lock:
            self.events.append({"t": time.time(), "kind": kind, **details})

    def trace(self) -> dict[str, Any]:
        """The session's trace JSON (see the proxy contract)."""
        with self._lock:
            failures = [dict(f) for f in self.failures]
            events = [dict(e) for e in self.events]
            stripped = dict(self.stripped_fields)
            requests = self.requests
            awaiting_engine = self.awaiting_engine
            now = time.time()
            calls = [list(c) for c in self.engine_calls] + [[t, now] for t in self._open_calls.values()]
        nodes = [n.to_json() for n in self.graph.nodes]
        return {
            "key": self.key,
            "adapter": self.adapter,
            "purpose": self.purpose,
            "max_requests": self.max_requests,
            "client_model": self.client_model,
            "safety": "on" if self.gate is not None else "off",
            "sampling": self.sampling.to_json(),
            "requests": requests,
            "awaiting_engine": awaiting_engine,
            "failures": failures,
            "events": events,
            "stripped_fields": stripped,
            "first_request_t": self.first_request_t,
            "engine_calls": calls,
            "engine_wait_s": engine_wait_s(calls, nodes, failures),
            "nodes": nodes,
            "sequences": self.graph.sequences(),
        }


def engine_wait_s(
    engine_calls: list[list[float]], nodes: list[dict[str, Any]], failures: list[dict[str, Any]]
) -> float:
    """Seconds the session spent waiting on the engine: the union of its engine calls' intervals.

    A streamed call's ``engine_call`` ends at the reply's headers, while its tokens arrive until the graph node's
    ``t_end`` (or the failure's ``t`` for a stream that broke), so those intervals join the union too. Calls the
    request budget answered never reached the engine and add nothing.
    """
    spans = [(c[0], c[1]) for c in engine_calls]
    spans += [(n["t_start"], n["t_end"]) for n in nodes if not n.get("budget_exhausted")]
    spans += [(f["t_start"], f["t"]) for f in failures if "t_start" in f and "t" in f]
    return union_seconds(spans)


def union_seconds(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of ``[start, end]`` intervals (overlaps counted once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


class SessionStore:
    """Session key -> Session, safe to use from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def create(
        self,
        *,
        adapter: str | None,
        purpose: Purpose,
        sampling: SamplingPolicy | None = None,
        max_requests: int | None = None,
        key: str | None = None,
        client_model: str | None = None,
        gate: SessionGate | None = None,
    ) -> Session:
        """Registers a session under a fresh random key (or the given one).

        Raises:
            KeyError: if the given key is already in use.
        """
        with self._lock:
            if key is None:
                key = "hrl-" + secrets.token_urlsafe(24)
            elif key in self._sessions:
                raise KeyError(key)
            session = Session(
                key=key,
                adapter=adapter,
                purpose=purpose,
                sampling=sampling or SamplingPolicy(),
                max_requests=max_requests,
                client_model=client_model,
                gate=gate,
            )
            self._sessions[key] = session
            return session

    def get(self, key: str | None) -> Session | None:
        if not key:
            return None
        with self._lock:
            return self._sessions.get(key)

    def pop(self, key: str) -> Session | None:
        with self._lock:
            return self._sessions.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
