"""Anthropic Messages request decoding: a `/v1/messages` body as one chat-completions request.

The system prompt (string or text blocks, plus any `role: "system"` entry inside `messages`) becomes the
leading system message; user text/image blocks become user messages and `tool_result` blocks `tool`
messages; assistant `tool_use` blocks become `tool_calls`; tools become function tools. What the engine
cannot take is removed first by the rules in anthropic_rules.py.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from harness_rl.proxy.dialects.anthropic_rules import (
    drop_betas,
    drop_billing_header,
    drop_context_management,
    drop_deferred_tools,
    drop_metadata,
    drop_output_config,
    drop_schemaless_tools,
    drop_thinking,
    drop_thinking_blocks,
    strip_cache_control,
)
from harness_rl.proxy.dialects.base import DecodedRequest
from harness_rl.proxy.dialects.wire_json import check_json_body
from harness_rl.proxy.errors import ProxyError

log = logging.getLogger(__name__)

#: Prefix that marks a tool_result with is_error=true in the tool message the model sees.
TOOL_ERROR_PREFIX = "Error: "
#: Key under which tool-call arguments that are not a JSON object travel inside a tool_use `input`.
RAW_ARGUMENTS_KEY = "_raw_arguments"

# Top-level request fields translated to the chat request; everything else is dropped by a rule or ignored.
_TRANSLATED = (
    "model",
    "messages",
    "system",
    "max_tokens",
    "stream",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
)


def _bad(message: str, param: str) -> ProxyError:
    return ProxyError(400, "invalid_request", message, param=param)


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    """Content as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _bad(f"'{param}' must be a string or a list of content blocks", param)
    for i, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _bad(f"{param}[{i}] must be an object with a 'type'", f"{param}[{i}]")
    return content


def _text_of(blocks: list[dict[str, Any]], param: str) -> str:
    """Joins text blocks; other block types are refused where only text can go (system prompts)."""
    parts = []
    for i, block in enumerate(blocks):
        if block["type"] != "text" or not isinstance(block.get("text"), str):
            raise _bad(f"{param}[{i}]: only text blocks are supported here", f"{param}[{i}]")
        parts.append(block["text"])
    return "\n\n".join(parts)


def _image_part(block: dict[str, Any], param: str) -> dict[str, Any]:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64" and isinstance(source.get("media_type"), str) and isinstance(source.get("data"), str):
        url = f"data:{source['media_type']};base64,{source['data']}"
    elif kind == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise _bad(f"{param}: unsupported image source", f"{param}.source")
    return {"type": "image_url", "image_url": {"url": url}}


def _block_text(block: dict[str, Any], param: str) -> str:
    """A text block's text; a missing text is empty, a non-string one refused."""
    text = block.get("text", "")
    if not isinstance(text, str):
        raise _bad(f"{param}.text must be a string", f"{param}.text")
    return text


def _user_parts(blocks: list[dict[str, Any]], param: str) -> Any:
    """Chat content for user text/image blocks: a string when it is all text."""
    parts = []
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            parts.append({"type": "text", "text": _block_text(block, f"{param}[{i}]")})
        elif block["type"] == "image":
            parts.append(_image_part(block, f"{param}[{i}]"))
        else:
            raise _bad(f"{param}[{i}]: unsupported block type '{block['type']}'", f"{param}[{i}]")
    if all(p["type"] == "text" for p in parts):
        return "\n\n".join(p["text"] for p in parts)
    return parts


def _tool_message(block: dict[str, Any], param: str) -> dict[str, Any]:
    """A tool_result block as a chat `tool` message; is_error shows as a text prefix."""
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str):
        raise _bad(f"{param}: tool_result needs a 'tool_use_id'", param)
    raw = block.get("content")
    content = _user_parts(_blocks(raw if raw is not None else "", f"{param}.content"), f"{param}.content")
    if block.get("is_error"):
        if isinstance(content, str):
            content = TOOL_ERROR_PREFIX + content
        else:
            content = [{"type": "text", "text": TOOL_ERROR_PREFIX.rstrip()}, *content]
    return {"role": "tool", "tool_call_id": tool_use_id, "content": content}


def tool_arguments(tool_input: Any) -> str:
    """The chat `arguments` string for a tool_use `input` (inverse of `tool_input`)."""
    if isinstance(tool_input, dict) and set(tool_input) == {RAW_ARGUMENTS_KEY}:
        return str(tool_input[RAW_ARGUMENTS_KEY])
    # vLLM's tool parsers serialize arguments with ensure_ascii=False; matching it keeps re-sent history
    # identical to what the model produced.
    return json.dumps(tool_input if tool_input is not None else {}, ensure_ascii=False)


def tool_input(arguments: Any) -> dict[str, Any]:
    """The tool_use `input` object for chat `arguments`.

    Arguments that are not a JSON object (the model wrote bad JSON) travel as {"_raw_arguments": text}, so
    the harness can report the error and the re-sent history holds exactly what the model wrote.
    """
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {RAW_ARGUMENTS_KEY: text}


def _assistant_message(blocks: list[dict[str, Any]], param: str) -> dict[str, Any]:
    texts, calls = [], []
    for i, block in enumerate(drop_thinking_blocks(blocks)):
        if block["type"] == "text":
            texts.append(_block_text(block, f"{param}[{i}]"))
        elif block["type"] == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise _bad(f"{param}[{i}]: tool_use needs 'id' and 'name'", f"{param}[{i}]")
            if not isinstance(block.get("input"), (dict, type(None))):
                raise _bad(f"{param}[{i}].input must be an object", f"{param}[{i}].input")
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": tool_arguments(block.get("input"))},
                }
            )
        else:
            raise _bad(f"{param}[{i}]: unsupported block type '{block['type']}'", f"{param}[{i}]")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _user_messages(blocks: list[dict[str, Any]], param: str) -> list[dict[str, Any]]:
    """A user turn as chat messages, in block order: each tool_result its own tool message, runs of
    text/image blocks one user message."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    run_start = 0
    for i, block in enumerate(blocks):
        if block["type"] == "tool_result":
            if run:
                out.append({"role": "user", "content": _user_parts(run, f"{param}[{run_start}:]")})
                run = []
            out.append(_tool_message(block, f"{param}[{i}]"))
        else:
            if not run:
                run_start = i
            run.append(block)
    if run:
        out.append({"role": "user", "content": _user_parts(run, f"{param}[{run_start}:]")})
    return out


def _chat_tools(tools: Any) -> tuple[list[dict[str, Any]], list[str]]:
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list", "tools")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _bad(f"tools[{i}] must be an object", f"tools[{i}]")
    kept, deferred = drop_deferred_tools(tools)
    kept, schemaless = drop_schemaless_tools(kept)
    out = []
    for tool in kept:
        if not isinstance(tool.get("name"), str):
            raise _bad("every tool needs a 'name'", "tools")
        function: dict[str, Any] = {"name": tool["name"], "parameters": tool["input_schema"]}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        if tool.get("strict") is True:
            # vLLM then pins the sampled input to input_schema (a structural tag), as the API promises.
            function["strict"] = True
        out.append({"type": "function", "function": function})
    return out, [f"tools.{name}" for name in deferred + schemaless]


def _tool_choice(choice: Any, body: dict[str, Any]) -> None:
    """Sets chat tool_choice / parallel_tool_calls on `body` from Anthropic's tool_choice."""
    if not isinstance(choice, dict):
        raise _bad("'tool_choice' must be an object", "tool_choice")
    kind = choice.get("type")
    if kind == "auto":
        body["tool_choice"] = "auto"
    elif kind == "any":
        body["tool_choice"] = "required"
    elif kind == "none":
        body["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        body["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise _bad("'tool_choice.type' must be auto, any, none or tool (with a name)", "tool_choice")
    if choice.get("disable_parallel_tool_use"):
        body["parallel_tool_calls"] = False


def decode_messages_request(body: Any) -> DecodedRequest:
    """Validates and translates a Messages request body. Raises ProxyError(400) naming the bad field."""
    body = check_json_body(body)
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object", "body")
    body = strip_cache_control(body)
    dropped = []
    for rule in (drop_thinking, drop_context_management, drop_output_config, drop_metadata, drop_betas):
        dropped += rule(body)
    ignored = sorted(k for k in body if k not in _TRANSLATED)
    if ignored:
        log.debug("anthropic request: ignoring fields %s", ignored)

    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean", "stream")
    system_parts = []
    if body.get("system") is not None:
        system = drop_billing_header(_blocks(body["system"], "system"))
        if system:
            system_parts.append(_text_of(system, "system"))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list", "messages")
    chat: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
            raise _bad(f"{param} must be an object with role user, assistant or system", param)
        blocks = _blocks(message.get("content"), f"{param}.content")
        if message["role"] == "system":
            # claude-code puts environment info in a system entry after the first user turn; chat
            # templates accept a system message only first, so it joins the system prompt.
            system_parts.append(_text_of(blocks, f"{param}.content"))
        elif message["role"] == "assistant":
            chat.append(_assistant_message(blocks, f"{param}.content"))
        else:
            chat.extend(_user_messages(blocks, f"{param}.content"))
    if system_parts:
        chat.insert(0, {"role": "system", "content": "\n\n".join(system_parts)})

    upstream: dict[str, Any] = {"messages": chat}
    max_tokens = body.get("max_tokens")
    if max_tokens is not None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise _bad("'max_tokens' must be a positive integer", "max_tokens")
        upstream["max_tokens"] = max_tokens
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            if not isinstance(body[name], (int, float)) or isinstance(body[name], bool):
                raise _bad(f"'{name}' must be a number", name)
            upstream[name] = body[name]
    stop_sequences = body.get("stop_sequences") or []
    if not isinstance(stop_sequences, list) or not all(isinstance(s, str) for s in stop_sequences):
        raise _bad("'stop_sequences' must be a list of strings", "stop_sequences")
    if stop_sequences:
        upstream["stop"] = stop_sequences
    if body.get("tools") is not None:
        tools, dropped_tools = _chat_tools(body["tools"])
        dropped += dropped_tools
        if tools:
            upstream["tools"] = tools
    if body.get("tool_choice") is not None:
        _tool_choice(body["tool_choice"], upstream)
        if "tools" not in upstream:
            upstream.pop("tool_choice", None)
            upstream.pop("parallel_tool_calls", None)
    model = body.get("model")
    return DecodedRequest(
        upstream_body=upstream,
        stream=stream,
        client_model=model if isinstance(model, str) else None,
        options={"stop_sequences": stop_sequences, "dropped_fields": dropped, "ignored_fields": ignored},
    )
