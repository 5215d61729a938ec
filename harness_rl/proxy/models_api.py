"""Model listing endpoints the harnesses probe before (or between) their model calls.

    GET /v1/models            OpenAI list (hermes, litellm, the openai SDKs' models.list)
    GET /api/v1/models        OpenRouter-style list (hermes asks it before every turn)
    GET /v1/models/{id}       one model card (hermes, once, when it lacks a context length)

Each answers for the caller's session: the served model (the session's adapter, or the base model) plus the
name the harness was configured with, both with the engine's context length and the session's output cap, so
a harness that sizes its context from the listing sizes it for the model that will really answer. The
context length is read once from the engine's own /v1/models card (vLLM reports ``max_model_len``).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harness_rl.proxy.dialects.openai_chat import bearer_token
from harness_rl.proxy.sessions import Session, SessionStore
from harness_rl.proxy.upstream import Upstream, UpstreamError

log = logging.getLogger(__name__)

MODELS_PATH = "/v1/models"
# One creation time for every card this process serves: a listing fetched twice must read the same (a per-call
# time.time() made two fetches straddling a second boundary differ).
_CREATED = int(time.time())


class ContextLength:
    """The engine's context length: given up front, or asked from the engine once and cached."""

    def __init__(self, upstream: Upstream, known: int | None = None) -> None:
        self._upstream = upstream
        self._value = known

    async def get(self) -> int | None:
        """The context length in tokens; None when the engine cannot tell (it is asked again next time)."""
        if self._value is None:
            self._value = await self._ask_engine()
        return self._value

    async def _ask_engine(self) -> int | None:
        try:
            status, content = await self._upstream.get(MODELS_PATH)
            if status != 200:
                raise UpstreamError(f"HTTP {status}")
            cards = json.loads(content).get("data") or []
        except (UpstreamError, ValueError, AttributeError) as exc:
            log.warning("could not read the engine's context length: %r", exc)
            return None
        lengths = [c.get("max_model_len") for c in cards if isinstance(c, dict) and c.get("max_model_len")]
        return int(lengths[0]) if lengths else None


def model_card(model_id: str, *, context_length: int | None, max_output_tokens: int | None) -> dict[str, Any]:
    """One model entry, readable both as an OpenAI model object and as an OpenRouter one."""
    card: dict[str, Any] = {"id": model_id, "object": "model", "created": _CREATED, "owned_by": "harness-rl"}
    if context_length is not None:
        card["context_length"] = context_length  # OpenRouter / hermes
        card["max_model_len"] = context_length  # vLLM
        card["top_provider"] = {"context_length": context_length, "max_completion_tokens": max_output_tokens}
    return card


def session_model_ids(session: Session, base_model: str) -> list[str]:
    """The served model first, then the harness's configured name when it differs."""
    ids = [session.adapter or base_model]
    if session.client_model and session.client_model not in ids:
        ids.append(session.client_model)
    return ids


def models_routes(sessions: SessionStore, base_model: str, context_length: ContextLength) -> list[Route]:
    """The three listing routes; every one needs a known session key (Bearer, x-api-key or x-goog-api-key)."""

    def session_of(request: Request) -> Session | None:
        key = (
            bearer_token(request)
            or request.headers.get("x-api-key", "").strip()
            or request.headers.get("x-goog-api-key", "").strip()
        )
        return sessions.get(key)

    def unauthorized() -> Response:
        message = "Unknown or missing session key."
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}
        return JSONResponse({"error": error}, status_code=401)

    async def cards(session: Session) -> list[dict[str, Any]]:
        n_ctx = await context_length.get()
        return [
            model_card(model_id, context_length=n_ctx, max_output_tokens=session.sampling.max_tokens)
            for model_id in session_model_ids(session, base_model)
        ]

    async def list_models(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return unauthorized()
        return JSONResponse({"object": "list", "data": await cards(session)})

    async def get_model(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return unauthorized()
        # Every name reaches the session's model (the proxy ignores the client's model field), so any id the
        # harness asks about is answered, under that id.
        card = (await cards(session))[0]
        return JSONResponse({**card, "id": request.path_params["model_id"]})

    return [
        Route(MODELS_PATH, list_models, methods=["GET"]),
        Route("/api/v1/models", list_models, methods=["GET"]),
        Route(MODELS_PATH + "/{model_id:path}", get_model, methods=["GET"]),
    ]
