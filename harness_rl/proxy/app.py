"""The capture proxy's app factory: admin API, one route set per wire dialect, shared state."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harness_rl.proxy.admin import admin_routes
from harness_rl.proxy.detect import detect
from harness_rl.proxy.dialects import Dialect, default_dialects
from harness_rl.proxy.gatekeeper import ProxyGate
from harness_rl.proxy.models_api import ContextLength, models_routes
from harness_rl.proxy.relay import BUDGET_MESSAGE, Relay
from harness_rl.proxy.sessions import SessionStore
from harness_rl.proxy.upstream import DEFAULT_TIMEOUT, Upstream
from harness_rl.proxy.upstream_aiohttp import AiohttpUpstream

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
    upstream: Upstream | None = None,
    sessions: SessionStore | None = None,
    context_length: int | None = None,
    safety_gate: ProxyGate | None = None,
) -> Starlette:
    """Builds the proxy app. It binds no port; see harness_rl.proxy.server for the runner.

    Args:
        engine_url: base URL of the vLLM OpenAI server (e.g. http://127.0.0.1:8000).
        admin_token: bearer token the admin API requires; must be non-empty.
        base_model: served model name used for sessions whose adapter is null.
        max_body_bytes: larger client bodies are refused with 413.
        budget_message: the assistant text that answers calls past a session's request budget.
        dialects: codecs to serve (default: all implemented).
        upstream_timeout: timeouts for the default engine client (connect, read and pool apply).
        upstream: the engine client, closed with the app (default: aiohttp to ``engine_url``, see
            proxy/upstream.py). Tests hand in ``harness_rl.testkit.httpx_upstream.HttpxUpstream`` over an
            in-process engine or a transport that records the wire.
        sessions: an existing store to share (default: a fresh one, exposed as app.state.sessions).
        context_length: the engine's context length (``max_model_len``), for the model listings and to cap each
            call's output budget (default: the listings ask the engine once; the relay learns it from the first
            engine refusal that names it).
        safety_gate: the run's safety gate; sessions registered with a ``safety`` spec are inspected by it
            (None: no call is inspected).

    Raises:
        ValueError: if admin_token or base_model is empty.
    """
    if not admin_token:
        raise ValueError("admin_token must be non-empty")
    if not base_model:
        raise ValueError("base_model must be non-empty")
    sessions = sessions if sessions is not None else SessionStore()
    if upstream is None:
        upstream = AiohttpUpstream(engine_url, timeout=upstream_timeout)
    relay = Relay(
        sessions,
        upstream,
        base_model=base_model,
        max_body_bytes=max_body_bytes,
        budget_message=budget_message,
        max_model_len=context_length,
    )

    dialects = list(dialects if dialects is not None else default_dialects())
    routes = [
        Route("/health", _health, methods=["GET"]),
        *admin_routes(sessions, admin_token, safety_gate),
        *models_routes(sessions, base_model, ContextLength(upstream, context_length)),
    ]
    for dialect in dialects:
        for path, methods in dialect.routes:
            routes.append(Route(path, _dialect_endpoint(relay, dialect), methods=list(methods)))
    # Last: any other path, served by the dialect its path, headers or body give away (proxy/detect.py).
    catch_all = _detecting_endpoint(relay, {d.name: d for d in dialects}, max_body_bytes)
    routes.append(Route("/{path:path}", catch_all, methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]))

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


def _detecting_endpoint(relay: Relay, dialects: dict[str, Dialect], max_body_bytes: int):
    async def endpoint(request: Request) -> Response:
        if request.method != "POST":
            return _unknown_endpoint(request, "only POST model calls are served here", status=404)
        try:
            raw = await _read_limited(request, max_body_bytes)
        except ValueError as exc:
            return _unknown_endpoint(request, str(exc), status=413)
        try:
            body = json.loads(raw) if raw else None
        except (ValueError, RecursionError):
            body = None  # the detected dialect's decoder reports malformed JSON in its own shape
        found = detect(request.url.path, request.headers, request.query_params, body)
        if found is None or found.dialect not in dialects:
            return _unknown_endpoint(request, "cannot tell the wire dialect from the path, headers or body")
        # Replays the body already read, and hands the codec the path parameters its own route would have.
        scope = {**request.scope, "path_params": found.path_params}
        return await relay.handle(Request(scope, receive=_replay(raw)), dialects[found.dialect])

    return endpoint


async def _read_limited(request: Request, limit: int) -> bytes:
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > limit:
            raise ValueError(f"Request body over {limit} bytes.")
    return bytes(raw)


def _replay(raw: bytes):
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if sent:  # the body was delivered; what remains is waiting for the client to go away
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return receive


def _unknown_endpoint(request: Request, reason: str, *, status: int = 400) -> Response:
    message = (
        f"Unknown dialect for {request.method} {request.url.path}: {reason}. The proxy serves POST "
        "/v1/chat/completions, /v1/responses, /v1/messages and /{version}/models/{model}:generateContent "
        "(or :streamGenerateContent)."
    )
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": "unknown_dialect"}
    return JSONResponse({"error": error}, status_code=status)


async def _health(request: Request) -> Response:
    return JSONResponse({"ok": True})
