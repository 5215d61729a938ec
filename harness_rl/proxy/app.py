"""The capture proxy's app factory: admin API, one route set per wire dialect, shared state."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harness_rl.proxy.admin import admin_routes
from harness_rl.proxy.dialects import Dialect, default_dialects
from harness_rl.proxy.relay import BUDGET_MESSAGE, Relay
from harness_rl.proxy.sessions import SessionStore
from harness_rl.proxy.upstream import DEFAULT_TIMEOUT, Upstream

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024


def create_app(
    engine_url: str,
    admin_token: str,
    *,
    base_model: str,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    budget_message: str = BUDGET_MESSAGE,
    dialects: Sequence[Dialect] | None = None,
    upstream_timeout: httpx.Timeout = DEFAULT_TIMEOUT,
    upstream_transport: httpx.AsyncBaseTransport | None = None,
    sessions: SessionStore | None = None,
) -> Starlette:
    """Builds the proxy app. It binds no port; see harness_rl.proxy.server for the runner.

    Args:
        engine_url: base URL of the vLLM OpenAI server (e.g. http://127.0.0.1:8000).
        admin_token: bearer token the admin API requires; must be non-empty.
        base_model: served model name used for sessions whose adapter is null.
        max_body_bytes: larger client bodies are refused with 413.
        budget_message: the assistant text that answers calls past a session's request budget.
        dialects: codecs to serve (default: all implemented).
        upstream_timeout: httpx timeouts for engine calls.
        upstream_transport: custom httpx transport for the engine (tests).
        sessions: an existing store to share (default: a fresh one, exposed as app.state.sessions).

    Raises:
        ValueError: if admin_token or base_model is empty.
    """
    if not admin_token:
        raise ValueError("admin_token must be non-empty")
    if not base_model:
        raise ValueError("base_model must be non-empty")
    sessions = sessions if sessions is not None else SessionStore()
    upstream = Upstream(engine_url, timeout=upstream_timeout, transport=upstream_transport)
    relay = Relay(
        sessions,
        upstream,
        base_model=base_model,
        max_body_bytes=max_body_bytes,
        budget_message=budget_message,
    )

    routes = [Route("/health", _health, methods=["GET"]), *admin_routes(sessions, admin_token)]
    for dialect in dialects if dialects is not None else default_dialects():
        for path, methods in dialect.routes:
            routes.append(Route(path, _dialect_endpoint(relay, dialect), methods=list(methods)))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await upstream.aclose()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.sessions = sessions
    app.state.relay = relay
    return app


def _dialect_endpoint(relay: Relay, dialect: Dialect):
    async def endpoint(request: Request) -> Response:
        return await relay.handle(request, dialect)

    endpoint.__name__ = f"{dialect.name}_endpoint"
    return endpoint


async def _health(request: Request) -> Response:
    return JSONResponse({"ok": True})
