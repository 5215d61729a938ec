"""Admin API: the rollout worker registers sessions and collects their traces.

    POST   /admin/sessions              {"adapter", "purpose", "max_requests", "sampling", "key", "client_model",
                                         "safety": {"workspace", "harness", "protected_paths", "scoring_paths",
                                                    "home", "text_action"} | null} -> {"key": ...}
    GET    /admin/sessions/{key}/trace  -> trace JSON (`?format=jsonl`: the JSONL export, see proxy/export.py)
    DELETE /admin/sessions/{key}        -> trace JSON; the key stops working

Every route needs `Authorization: Bearer <admin token>`.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harness_rl.proxy import fast_json
from harness_rl.proxy.export import trace_to_jsonl
from harness_rl.proxy.gatekeeper import ProxyGate, SafetySpec
from harness_rl.proxy.sessions import PURPOSES, SamplingPolicy, SessionStore

_SESSION_FIELDS = {"adapter", "purpose", "max_requests", "sampling", "key", "client_model", "safety"}
_SAFETY_FIELDS = {"workspace", "harness", "protected_paths", "scoring_paths", "home", "text_action"}
_SAMPLING_FIELDS = {"temperature", "max_tokens", "top_p"}


class BadField(ValueError):
    """A request body field that fails validation."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _error(status: int, message: str, *, type_: str, param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "param": param}}, status_code=status)


def parse_session_spec(body: Any) -> dict[str, Any]:
    """Validates a POST /admin/sessions body into SessionStore.create keyword arguments.

    Raises:
        BadField: naming the first field that is missing, unknown or of the wrong type/range.
    """
    if not isinstance(body, dict):
        raise BadField("body", "must be a JSON object")
    unknown = sorted(set(body) - _SESSION_FIELDS)
    if unknown:
        raise BadField(unknown[0], f"unknown field (allowed: {', '.join(sorted(_SESSION_FIELDS))})")
    adapter = body.get("adapter")
    if adapter is not None and (not isinstance(adapter, str) or not adapter):
        raise BadField("adapter", "must be a non-empty string or null (null = base model)")
    if "purpose" not in body:
        raise BadField("purpose", f"is required (one of {', '.join(PURPOSES)})")
    if body["purpose"] not in PURPOSES:
        raise BadField("purpose", f"must be one of {', '.join(PURPOSES)}, got {body['purpose']!r}")
    max_requests = body.get("max_requests")
    if max_requests is not None and (not _is_int(max_requests) or max_requests < 0):
        raise BadField("max_requests", "must be an integer >= 0 or null (no budget)")
    key = body.get("key")
    if key is not None and (not isinstance(key, str) or not key or any(c.isspace() for c in key)):
        raise BadField("key", "must be a non-empty string without whitespace")
    client_model = body.get("client_model")
    if client_model is not None and (not isinstance(client_model, str) or not client_model):
        raise BadField("client_model", "must be a non-empty string or null (the harness's configured model id)")
    return {
        "adapter": adapter,
        "client_model": client_model,
        "purpose": body["purpose"],
        "max_requests": max_requests,
        "sampling": _parse_sampling(body.get("sampling")),
        "key": key,
        "safety": _parse_safety(body.get("safety")),
    }


def _parse_safety(raw: Any) -> SafetySpec | None:
    """The rollout facts the safety gate needs; null = this session's tool calls are not inspected."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadField("safety", "must be an object or null")
    unknown = sorted(set(raw) - _SAFETY_FIELDS)
    if unknown:
        raise BadField(f"safety.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(_SAFETY_FIELDS))})")
    workspace = raw.get("workspace")
    if not isinstance(workspace, str) or not workspace.startswith("/"):
        raise BadField("safety.workspace", "is required: the absolute path of the rollout's workspace")
    for name in ("harness", "home", "text_action"):
        if raw.get(name) is not None and (not isinstance(raw[name], str) or not raw[name]):
            raise BadField(f"safety.{name}", "must be a non-empty string or null")
    for name in ("protected_paths", "scoring_paths"):
        paths = raw.get(name) or []
        if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
            raise BadField(f"safety.{name}", "must be a list of non-empty strings")
    text_action = raw.get("text_action")
    if text_action is not None:
        try:
            if re.compile(text_action).groups < 1:
                raise BadField("safety.text_action", "needs a group: group 1 is the shell command")
        except re.error as exc:
            raise BadField("safety.text_action", f"is not a valid regex: {exc}") from exc
    return SafetySpec(
        workspace=workspace,
        harness=raw.get("harness"),
        protected_paths=tuple(raw.get("protected_paths") or ()),
        scoring_paths=tuple(raw.get("scoring_paths") or ()),
        home=raw.get("home"),
        text_action=text_action,
    )


def _parse_sampling(raw: Any) -> SamplingPolicy:
    if raw is None:
        return SamplingPolicy()
    if not isinstance(raw, dict):
        raise BadField("sampling", "must be an object or null")
    unknown = sorted(set(raw) - _SAMPLING_FIELDS)
    if unknown:
        raise BadField(f"sampling.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(_SAMPLING_FIELDS))})")
    temperature, top_p, max_tokens = raw.get("temperature"), raw.get("top_p"), raw.get("max_tokens")
    if temperature is not None and (not _is_number(temperature) or temperature < 0):
        raise BadField("sampling.temperature", "must be a number >= 0")
    if top_p is not None and (not _is_number(top_p) or not 0 < top_p <= 1):
        raise BadField("sampling.top_p", "must be a number in (0, 1]")
    if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
        raise BadField("sampling.max_tokens", "must be an integer >= 1")
    return SamplingPolicy(
        temperature=None if temperature is None else float(temperature),
        max_tokens=max_tokens,
        top_p=None if top_p is None else float(top_p),
    )


def _trace_response(trace: dict[str, Any]) -> Response:
    """The trace as compact JSON. A 20-turn agent session's trace holds ~50,000 token ids, which the json
    module took 5-10 ms to write (proxy/fast_json.py: under 1 ms), and it is written twice per session (GET
    trace, then DELETE)."""
    return Response(fast_json.dumps(trace), media_type="application/json")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def admin_routes(sessions: SessionStore, admin_token: str, gate: ProxyGate | None = None) -> list[Route]:
    """The admin routes, each guarded by the admin bearer token.

    ``gate`` is the run's safety gate (None: off); sessions registered with a ``safety`` spec get it.
    """

    def authorized(request: Request) -> bool:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(), admin_token.encode())

    def unauthorized() -> JSONResponse:
        return _error(401, "Missing or wrong admin token.", type_="authentication_error")

    async def create_session(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        try:
            spec = parse_session_spec(json.loads(await request.body()))
        except ValueError as exc:  # BadField and malformed JSON
            param = exc.field if isinstance(exc, BadField) else "body"
            return _error(400, f"Invalid session: {exc}", type_="invalid_request_error", param=param)
        safety = spec.pop("safety")
        try:
            session = sessions.create(**spec, gate=gate.for_session(safety) if gate and safety else None)
        except KeyError:
            return _error(409, f"Session key {spec['key']!r} already exists.", type_="conflict", param="key")
        return JSONResponse({"key": session.key}, status_code=201)

    async def get_trace(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        session = sessions.get(request.path_params["key"])
        if session is None:
            return _error(404, "No such session.", type_="not_found")
        fmt = request.query_params.get("format", "json")
        if fmt == "jsonl":
            return Response(trace_to_jsonl(session.trace()), media_type="application/x-ndjson")
        if fmt != "json":
            message = f"Unknown format {fmt!r} (json or jsonl)."
            return _error(400, message, type_="invalid_request_error", param="format")
        return _trace_response(session.trace())

    async def end_session(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        session = sessions.pop(request.path_params["key"])
        if session is None:
            return _error(404, "No such session.", type_="not_found")
        return _trace_response(session.trace())

    return [
        Route("/admin/sessions", create_session, methods=["POST"]),
        Route("/admin/sessions/{key}/trace", get_trace, methods=["GET"]),
        Route("/admin/sessions/{key}", end_session, methods=["DELETE"]),
    ]
