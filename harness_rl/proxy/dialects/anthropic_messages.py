"""Anthropic Messages (`POST /v1/messages`, also `?beta=true` as claude-code sends it).

A request becomes one chat-completions request: the system prompt (string or text blocks, plus any
`role: "system"` entry inside `messages`) becomes the leading system message; user text blocks become user
messages and `tool_result` blocks `tool` messages; assistant `tool_use` blocks become `tool_calls`; tools
become function tools. What the engine cannot take is dropped by the small named rules below, each saying
why. Replies go back as an Anthropic `message` (text and `tool_use` blocks) or as its event stream
(`message_start`, `content_block_start/delta/stop`, `message_delta`, `message_stop`).
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from starlette.requests import Request

from harness_rl.proxy.dialects.base import DecodedRequest, Dialect, sse
from harness_rl.proxy.dialects.openai_chat import bearer_token
from harness_rl.proxy.errors import ProxyError

log = logging.getLogger(__name__)

BILLING_HEADER_PREFIX = "x-anthropic-billing-header:"
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
# Chat finish_reason -> Anthropic stop_reason.
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _bad(message: str, param: str) -> ProxyError:
    return ProxyError(400, "invalid_request", message, param=param)


# ---------------------------------------------------------------------------------------------------------
# Drop rules: each removes something the engine cannot take and returns the names it removed.


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


# ---------------------------------------------------------------------------------------------------------
# Request translation.


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
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif source.get("type") == "url":
        url = source.get("url")
    else:
        raise _bad(f"{param}: unsupported image source", param)
    return {"type": "image_url", "image_url": {"url": url}}


def _user_parts(blocks: list[dict[str, Any]], param: str) -> Any:
    """Chat content for user text/image blocks: a string when it is all text."""
    parts = []
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
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
            texts.append(str(block.get("text", "")))
        elif block["type"] == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise _bad(f"{param}[{i}]: tool_use needs 'id' and 'name'", f"{param}[{i}]")
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


# ---------------------------------------------------------------------------------------------------------
# Reply translation.


def stop_reason(finish_reason: str | None, has_tool_use: bool, stop_sequence: str | None = None) -> str:
    """Anthropic stop_reason for a chat finish_reason."""
    if finish_reason == "length":
        return "max_tokens"
    if has_tool_use:
        return "tool_use"
    if stop_sequence is not None:
        return "stop_sequence"
    return _STOP_REASONS.get(finish_reason or "stop", "end_turn")


def _stop_sequence(choice: dict[str, Any], req: DecodedRequest) -> str | None:
    """vLLM reports the matched stop string as the choice's `stop_reason`."""
    matched = choice.get("stop_reason")
    if isinstance(matched, str) and matched in (req.options.get("stop_sequences") or ()):
        return matched
    return None


def _usage(usage: dict[str, Any] | None) -> dict[str, int]:
    usage = usage or {}
    return {
        "input_tokens": int(usage.get("prompt_tokens") or 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
    }


def _message_id(upstream_id: Any) -> str:
    return f"msg_{upstream_id}" if upstream_id else f"msg_{uuid.uuid4().hex}"


class AnthropicMessages(Dialect):
    name = "anthropic_messages"
    routes = (("/v1/messages", ("POST",)),)

    def api_key(self, request: Request) -> str | None:
        key = request.headers.get("x-api-key", "").strip()
        return key or bearer_token(request)

    def decode_request(self, body: Any, path_params: dict[str, Any]) -> DecodedRequest:
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

    def encode_response(self, upstream: dict[str, Any], req: DecodedRequest) -> dict[str, Any]:
        choice = (upstream.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        content: list[dict[str, Any]] = []
        if message.get("content"):
            content.append({"type": "text", "text": message["content"]})
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            content.append(
                {
                    "type": "tool_use",
                    "id": call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}",
                    "name": function.get("name", ""),
                    "input": tool_input(function.get("arguments") or ""),
                }
            )
        has_tool_use = any(b["type"] == "tool_use" for b in content)
        return {
            "id": _message_id(upstream.get("id")),
            "type": "message",
            "role": "assistant",
            "model": req.client_model or upstream.get("model", ""),
            "content": content,
            "stop_reason": stop_reason(choice.get("finish_reason"), has_tool_use, _stop_sequence(choice, req)),
            "stop_sequence": _stop_sequence(choice, req),
            "usage": _usage(upstream.get("usage")),
        }

    def stream_encoder(self, req: DecodedRequest) -> _MessagesStreamEncoder:
        return _MessagesStreamEncoder(req)

    def error_body(self, error: ProxyError) -> dict[str, Any]:
        return {"type": "error", "error": {"type": error_type(error), "message": error.message}}


def error_type(error: ProxyError) -> str:
    """Anthropic's error type for a proxy error (the SDK picks its exception class by HTTP status)."""
    if error.kind == "invalid_api_key":
        return "authentication_error"
    if error.kind == "payload_too_large":
        return "request_too_large"
    if error.kind == "invalid_request" or (error.kind == "upstream_error" and 400 <= error.status < 500):
        return "invalid_request_error"
    return "api_error"


def _event(data: dict[str, Any]) -> bytes:
    return sse(data, event=data["type"])


class _MessagesStreamEncoder:
    """Turns chat chunks into Anthropic stream events.

    One content block is open at a time: text deltas go to a text block as they come; each new tool call (a
    delta with an id or name) opens a tool_use block. A tool call's argument fragments are held until its
    block closes and then sent as one input_json_delta holding a JSON object: the SDKs parse the
    accumulated partial JSON and fail on text that is not a JSON object, which a model can write (see
    `tool_input`). The finish chunk closes the open block; message_delta (stop_reason, usage) and
    message_stop wait for the end of the upstream stream, because the usage chunk follows the finish chunk.
    """

    def __init__(self, req: DecodedRequest) -> None:
        self._req = req
        self._started = False
        self._open: int | None = None  # index of the open content block
        self._open_kind: str | None = None
        self._n_blocks = 0
        self._tool_blocks: dict[int, int] = {}  # chat tool-call index -> block index
        self._tool_args: dict[int, str] = {}  # block index -> arguments received so far
        self._has_tool_use = False
        self._finish_reason: str | None = None
        self._stop_sequence: str | None = None
        self._usage: dict[str, Any] | None = None
        self._input_tokens = 0

    def _start(self, chunk: dict[str, Any]) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        self._input_tokens = len(chunk.get("prompt_token_ids") or [])
        message = {
            "id": _message_id(chunk.get("id")),
            "type": "message",
            "role": "assistant",
            "model": self._req.client_model or chunk.get("model", ""),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self._input_tokens, "output_tokens": 0},
        }
        return [_event({"type": "message_start", "message": message})]

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        index, self._open, self._open_kind = self._open, None, None
        events = []
        arguments = self._tool_args.pop(index, "")
        if arguments:
            partial = json.dumps(tool_input(arguments), ensure_ascii=False)
            delta = {"type": "input_json_delta", "partial_json": partial}
            events.append(_event({"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(_event({"type": "content_block_stop", "index": index}))
        return events

    def _open_block(self, block: dict[str, Any]) -> tuple[list[bytes], int]:
        events = self._close()
        index = self._n_blocks
        self._n_blocks += 1
        self._open, self._open_kind = index, block["type"]
        events.append(_event({"type": "content_block_start", "index": index, "content_block": block}))
        return events, index

    def on_chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        events = self._start(chunk)
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in (chunk.get("choices") or [])[:1]:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                if self._open_kind != "text":
                    opened, _ = self._open_block({"type": "text", "text": ""})
                    events += opened
                events.append(
                    _event(
                        {
                            "type": "content_block_delta",
                            "index": self._open,
                            "delta": {"type": "text_delta", "text": delta["content"]},
                        }
                    )
                )
            for call in delta.get("tool_calls") or []:
                events += self._tool_delta(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
                self._stop_sequence = _stop_sequence(choice, self._req)
                events += self._close()
        return events

    def _tool_delta(self, call: dict[str, Any]) -> list[bytes]:
        events: list[bytes] = []
        chat_index = call.get("index", 0)
        function = call.get("function") or {}
        if chat_index not in self._tool_blocks or (call.get("id") and self._open != self._tool_blocks[chat_index]):
            block = {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}",
                "name": function.get("name") or "",
                "input": {},
            }
            opened, index = self._open_block(block)
            events += opened
            self._tool_blocks[chat_index] = index
            self._has_tool_use = True
        if function.get("arguments"):
            index = self._tool_blocks[chat_index]
            if index != self._open:
                log.warning("tool call %s: arguments after its block closed are lost", chat_index)
            self._tool_args[index] = self._tool_args.get(index, "") + function["arguments"]
        return events

    def on_error(self, message: str) -> list[bytes]:
        # The anthropic SDKs raise APIStatusError on an `error` event.
        error = ProxyError(502, "upstream_error", message)
        return [sse({"type": "error", "error": {"type": error_type(error), "message": message}}, event="error")]

    def on_end(self) -> list[bytes]:
        events = self._start({}) + self._close()
        usage = _usage(self._usage)
        if not self._usage:
            usage["input_tokens"] = self._input_tokens
        events.append(
            _event(
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": stop_reason(self._finish_reason, self._has_tool_use, self._stop_sequence),
                        "stop_sequence": self._stop_sequence,
                    },
                    "usage": usage,
                }
            )
        )
        events.append(_event({"type": "message_stop"}))
        return events
