"""Which wire dialect a request speaks when its path is not one of the dialects' own routes.

Harnesses are pointed at the proxy by a base URL, and they do not agree on whether it includes `/v1`
(`/chat/completions`, `/v1/v1/messages`), so the proxy does not insist on exact paths. The evidence is
weighed in a fixed order, strongest first:

1. path: the last segments name the endpoint (`.../chat/completions`, `.../responses`, `.../messages`,
   `.../models/{m}:generateContent`);
2. headers: Anthropic's `anthropic-version` / `x-api-key`, Google's `x-goog-api-key` / `?key=`;
3. body shape: `contents` (Google), `input` (Responses), `messages` with Anthropic-only fields (top-level
   `system`, `tool_use`/`tool_result` blocks, tools with `input_schema`) or else Chat Completions.

A request that matches none of them is refused as an unknown dialect (see app.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CHAT = "openai_chat"
RESPONSES = "openai_responses"
ANTHROPIC = "anthropic_messages"
GOOGLE = "google_generate"

_PATH_SUFFIXES = ((("chat", "completions"), CHAT), (("responses",), RESPONSES), (("messages",), ANTHROPIC))
_GOOGLE_ACTIONS = ("generateContent", "streamGenerateContent")
_ANTHROPIC_BLOCK_TYPES = {"tool_use", "tool_result", "thinking", "redacted_thinking", "document"}
_CHAT_ONLY_FIELDS = {"stream_options", "max_completion_tokens", "n", "response_format", "logit_bias", "functions"}
_CHAT_ONLY_ROLES = {"system", "developer", "tool", "function"}


@dataclass(frozen=True)
class Detection:
    """A detected dialect, what gave it away, and the path parameters its codec expects."""

    dialect: str
    evidence: str  # "path", "headers" or "body"
    path_params: dict[str, Any] = field(default_factory=dict)


def by_path(path: str) -> Detection | None:
    """Detects the dialect from the URL path's last segments."""
    segments = [s for s in path.split("/") if s]
    if not segments:
        return None
    last = segments[-1]
    model, sep, action = last.rpartition(":")
    if sep and action in _GOOGLE_ACTIONS and model:
        return Detection(GOOGLE, "path", {"model_action": last})
    for suffix, dialect in _PATH_SUFFIXES:
        if tuple(segments[-len(suffix) :]) == suffix:
            return Detection(dialect, "path")
    return None


def by_headers(headers: Mapping[str, str], query: Mapping[str, str]) -> Detection | None:
    """Detects Anthropic or Google from their own auth and version headers (Bearer says nothing)."""
    if "anthropic-version" in headers or "x-api-key" in headers:
        return Detection(ANTHROPIC, "headers")
    if "x-goog-api-key" in headers or "key" in query:
        return Detection(GOOGLE, "headers", {"model_action": _google_action(query)})
    return None


def by_body(body: Any, query: Mapping[str, str]) -> Detection | None:
    """Detects the dialect from the JSON body's top-level shape."""
    if not isinstance(body, dict):
        return None
    if "contents" in body:
        return Detection(GOOGLE, "body", {"model_action": _google_action(query)})
    if "input" in body and "messages" not in body:
        return Detection(RESPONSES, "body")
    if "messages" in body:
        return Detection(ANTHROPIC if _looks_anthropic(body) else CHAT, "body")
    return None


def detect(path: str, headers: Mapping[str, str], query: Mapping[str, str], body: Any) -> Detection | None:
    """Path, then headers, then body shape; None when nothing identifies the dialect."""
    return by_path(path) or by_headers(headers, query) or by_body(body, query)


def _google_action(query: Mapping[str, str]) -> str:
    # Without a `:method` in the path only `alt=sse` says the client wants a stream.
    action = "streamGenerateContent" if query.get("alt") == "sse" else "generateContent"
    return f"unknown:{action}"


def _looks_anthropic(body: dict[str, Any]) -> bool:
    if _CHAT_ONLY_FIELDS & body.keys():
        return False
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    roles = {m.get("role") for m in messages if isinstance(m, dict)}
    if roles & _CHAT_ONLY_ROLES:
        return False
    if "system" in body:
        return True
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    if any(isinstance(t, dict) and "input_schema" in t for t in tools):
        return True
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") in _ANTHROPIC_BLOCK_TYPES for block in content
        ):
            return True
    return False
