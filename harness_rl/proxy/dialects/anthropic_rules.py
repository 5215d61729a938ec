"""Anthropic Messages tolerance rules: what claude-code and the anthropic SDKs send that the engine cannot take.

Each rule removes one such thing and says why it is safe to drop; the request decoder
(anthropic_request.py) applies them before translating, and records the dropped names on the request.
"""

from __future__ import annotations

from typing import Any

BILLING_HEADER_PREFIX = "x-anthropic-billing-header:"


def drop_thinking(body: dict[str, Any]) -> list[str]:
    """Drops `thinking` ({type: enabled|adaptive, budget_tokens, display}).

    Extended-thinking configuration has no chat-completions equivalent: whether the engine's model reasons
    is fixed by its chat template for the session, and whatever it samples is captured either way.
    """
    return ["thinking"] if body.pop("thinking", None) is not None else []


def drop_context_management(body: dict[str, Any]) -> list[str]:
    """Drops `context_management` (server-side edits such as clear_thinking / clear_tool_uses).

    Those edits rewrite the conversation on Anthropic's side. The engine has no such feature, and the proxy
    must not rewrite history itself: the trace links calls by the prompts the harness really sent.
    """
    return ["context_management"] if body.pop("context_management", None) is not None else []


def drop_output_config(body: dict[str, Any]) -> list[str]:
    """Drops `output_config` ({effort: ...}, output format hints).

    Effort levels steer Anthropic models' reasoning budget; vLLM has no such knob, and a sampling change
    requested by the harness must not alter the distribution the trainer optimizes.
    """
    return ["output_config"] if body.pop("output_config", None) is not None else []


def drop_metadata(body: dict[str, Any]) -> list[str]:
    """Drops `metadata` (claude-code sends `user_id`, a JSON string with device and session ids).

    It is Anthropic's abuse-tracking id; the session key already identifies the rollout, and chat
    completions' own `metadata` means something else (stored-completion tags), so it is not forwarded.
    """
    return ["metadata"] if body.pop("metadata", None) is not None else []


def drop_betas(body: dict[str, Any]) -> list[str]:
    """Drops `betas` (the beta SDK's list of Anthropic feature flags; the `anthropic-beta` header is ignored
    likewise).

    They switch on Anthropic server features (interleaved thinking, context management, ...) that the
    engine does not have; nothing on the engine side can be enabled by them.
    """
    return ["betas"] if body.pop("betas", None) is not None else []


def strip_cache_control(value: Any) -> Any:
    """Returns `value` with every `cache_control` key removed, at any depth (system blocks, message content
    blocks, tool_result blocks, tools).

    Cache breakpoints are Anthropic prompt-caching hints; vLLM caches shared prefixes by itself, and the
    key is not part of any chat content part or tool.
    """
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


def drop_deferred_tools(tools: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Drops tools marked `defer_loading` (claude-code's `DeferredToolPlaceholder`).

    Deferred tools are loaded on demand by Anthropic's server-side tool search; the placeholder says
    "never call this tool" and offering it to the engine's model only invites a bogus call.
    """
    kept = [t for t in tools if not t.get("defer_loading")]
    return kept, [str(t.get("name")) for t in tools if t.get("defer_loading")]


def drop_schemaless_tools(tools: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Drops tools without an `input_schema` (Anthropic server tools and versioned built-ins such as
    `{"type": "web_search_20250305"}` or `{"type": "bash_20250124"}`).

    Anthropic runs or defines those itself; a chat function tool needs a JSON schema, and the engine cannot
    execute server tools.
    """
    kept = [t for t in tools if isinstance(t.get("input_schema"), dict)]
    return kept, [str(t.get("name") or t.get("type")) for t in tools if not isinstance(t.get("input_schema"), dict)]


def drop_billing_header(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drops claude-code's `x-anthropic-billing-header: cc_version=...;` system block.

    It is attribution metadata that Anthropic's API consumes rather than shows the model, and it changes
    with every claude-code version, which would make otherwise identical prompts differ.
    """
    return [
        b for b in blocks if not (b.get("type") == "text" and str(b.get("text", "")).startswith(BILLING_HEADER_PREFIX))
    ]


def drop_thinking_blocks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drops `thinking` / `redacted_thinking` blocks from assistant history.

    Their signatures are Anthropic's; this proxy never sends such blocks, and chat messages have no place
    for them (the engine's chat template decides how past reasoning is rendered).
    """
    return [b for b in blocks if b.get("type") not in ("thinking", "redacted_thinking")]
