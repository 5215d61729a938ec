"""OpenAI Responses (`POST /v1/responses`), the dialect codex speaks.

Decoding turns the `input` item list into chat messages: `instructions` becomes a leading system message,
developer/system message items become system messages, `function_call` items become assistant
`tool_calls` (merged into the preceding assistant message, as the engine rendered them), and
`function_call_output` items become tool messages; reasoning items are dropped. Only `function` tools
reach the engine (hosted tools such as web_search and codex's `namespace` tool are dropped).

Encoding builds a Responses object (message / function_call / reasoning output items, usage) and, when
streaming, the full event sequence codex insists on: response.created, response.in_progress, then per
output item output_item.added, its content_part / text / arguments deltas and dones, output_item.done,
and finally response.completed with usage. The proxy is stateless: `previous_response_id` is refused.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from starlette.requests import Request

from harness_rl.proxy.dialects.base import DecodedRequest, Dialect, sse
from harness_rl.proxy.dialects.openai_chat import bearer_token
from harness_rl.proxy.errors import ProxyError

# OpenAI's (type, code) for each proxy error kind.
_ERROR_SHAPES = {
    "invalid_api_key": ("invalid_request_error", "invalid_api_key"),
    "invalid_request": ("invalid_request_error", None),
    "payload_too_large": ("invalid_request_error", "payload_too_large"),
    "upstream_error": ("server_error", "upstream_error"),
}
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
_SYSTEM_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# Items that carry nothing the engine should see again.
_DROPPED_ITEMS = ("reasoning",)


def _bad(message: str, param: str) -> ProxyError:
    return ProxyError(400, "invalid_request", message, param=param)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _content_to_chat(content: Any, param: str) -> str | list[dict[str, Any]]:
    """Responses content (string or parts) -> chat content: a string unless it holds images."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"'{param}' must be a string or a list of content parts", param)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        p = f"{param}[{j}]"
        if not isinstance(part, dict):
            raise _bad(f"'{p}' must be an object", p)
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            if not isinstance(part.get("text"), str):
                raise _bad(f"'{p}.text' must be a string", f"{p}.text")
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal") or "")})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise _bad(f"'{p}': only input_image with an image_url is supported", p)
            image: dict[str, Any] = {"url": url}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise _bad(f"'{p}': content part type {kind!r} is not supported", p)
    if all(part["type"] == "text" for part in parts):
        # vLLM joins text parts with newlines for string-content chat templates; do the same up front.
        return "\n".join(part["text"] for part in parts)
    return parts


def _decode_input(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("'instructions' must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise _bad("'input' must be a string or a non-empty list of items", "input")
    # The assistant message that function_call items join: the last message, if it is an assistant one
    # and nothing but dropped items came between.
    open_assistant: dict[str, Any] | None = None
    for i, item in enumerate(items):
        param = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(f"'{param}' must be an object", param)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = _SYSTEM_ROLES.get(item.get("role"))
            if role is None:
                raise _bad(f"'{param}.role' must be one of user, assistant, system, developer", f"{param}.role")
            message = {"role": role, "content": _content_to_chat(item.get("content"), f"{param}.content")}
            messages.append(message)
            open_assistant = message if role == "assistant" else None
        elif kind == "function_call":
            name, arguments = item.get("name"), item.get("arguments")
            call_id = item.get("call_id") or item.get("id")
            if not isinstance(name, str) or not isinstance(arguments, str) or not isinstance(call_id, str):
                raise _bad(f"'{param}' must have string 'name', 'arguments' and 'call_id'", param)
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            if open_assistant is None:
                open_assistant = {"role": "assistant", "content": None}
                messages.append(open_assistant)
            open_assistant.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str):
                raise _bad(f"'{param}.call_id' must be a string", f"{param}.call_id")
            if output is None:
                output = ""
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "content": _content_to_chat(output, f"{param}.output")}
            )
            open_assistant = None
        elif kind in _DROPPED_ITEMS:
            continue
        else:
            raise _bad(f"'{param}': input item type {kind!r} is not supported", param)
    return messages


def _decode_tools(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(chat tools for the engine, the function tools as echoed in the Responses object)."""
    tools = body.get("tools")
    if tools is None:
        return [], []
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list", "tools")
    chat_tools, echoed = [], []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _bad(f"'tools[{i}]' must be an object", f"tools[{i}]")
        if tool.get("type") != "function":
            continue  # hosted / namespace tools: the engine cannot run them
        if not isinstance(tool.get("name"), str):
            raise _bad(f"'tools[{i}].name' must be a string", f"tools[{i}].name")
        function: dict[str, Any] = {"name": tool["name"]}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        parameters = tool.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise _bad(f"'tools[{i}].parameters' must be an object", f"tools[{i}].parameters")
            function["parameters"] = parameters
        chat_tools.append({"type": "function", "function": function})
        echoed.append({"type": "function", **function, "strict": tool.get("strict")})
    return chat_tools, echoed


def _decode_tool_choice(choice: Any, tool_names: set[str]) -> Any:
    """Responses tool_choice -> chat tool_choice; None when the engine should use its default."""
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        if choice.get("name") not in tool_names:
            raise _bad(f"tool_choice names unknown function {choice.get('name')!r}", "tool_choice")
        return {"type": "function", "function": {"name": choice["name"]}}
    if choice is None or isinstance(choice, dict):
        return None  # hosted-tool or allowed_tools choices: leave the engine's default
    raise _bad("'tool_choice' must be 'auto', 'none', 'required' or a function choice", "tool_choice")


def _decode_text_format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return None


class OpenAIResponses(Dialect):
    name = "openai_responses"
    routes = (("/v1/responses", ("POST",)),)

    def api_key(self, request: Request) -> str | None:
        return bearer_token(request)

    def decode_request(self, body: Any, path_params: dict[str, Any]) -> DecodedRequest:
        if not isinstance(body, dict):
            raise _bad("request body must be a JSON object", "body")
        if body.get("previous_response_id") is not None:
            raise _bad("'previous_response_id' is not supported: send the whole input", "previous_response_id")
        stream = body.get("stream") or False
        if not isinstance(stream, bool):
            raise _bad("'stream' must be a boolean", "stream")
        messages = _decode_input(body)
        chat_tools, echoed_tools = _decode_tools(body)
        upstream: dict[str, Any] = {"messages": messages}
        if chat_tools:
            upstream["tools"] = chat_tools
            choice = _decode_tool_choice(body.get("tool_choice"), {t["function"]["name"] for t in chat_tools})
            if choice is not None:
                upstream["tool_choice"] = choice
            if isinstance(body.get("parallel_tool_calls"), bool):
                upstream["parallel_tool_calls"] = body["parallel_tool_calls"]
        max_tokens = body.get("max_output_tokens")
        if max_tokens is not None:
            if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
                raise _bad("'max_output_tokens' must be a positive integer", "max_output_tokens")
            upstream["max_tokens"] = max_tokens
        for key in ("temperature", "top_p"):
            if body.get(key) is not None:
                upstream[key] = body[key]
        response_format = _decode_text_format(body.get("text"))
        if response_format is not None:
            upstream["response_format"] = response_format
        model = body.get("model")
        return DecodedRequest(
            upstream_body=upstream,
            stream=stream,
            client_model=model if isinstance(model, str) else None,
            options={
                "tools": echoed_tools,
                "tool_choice": body.get("tool_choice") if body.get("tool_choice") is not None else "auto",
                "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
                "instructions": body.get("instructions"),
                "max_output_tokens": max_tokens,
                "temperature": body.get("temperature"),
                "top_p": body.get("top_p"),
                "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
            },
        )

    def response_object(
        self,
        req: DecodedRequest,
        *,
        response_id: str,
        created_at: float,
        model: str | None,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        finish_reason: str | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A Responses `response` object (also the payload of created/in_progress/completed events)."""
        opts = req.options
        incomplete = None
        if status == "completed" and finish_reason == "length":
            status, incomplete = "incomplete", {"reason": "max_output_tokens"}
        return {
            "id": response_id,
            "object": "response",
            "created_at": created_at,
            "status": status,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": opts.get("instructions"),
            "max_output_tokens": opts.get("max_output_tokens"),
            "model": req.client_model or model or "",
            "output": output,
            "parallel_tool_calls": opts.get("parallel_tool_calls", True),
            "temperature": opts.get("temperature"),
            "top_p": opts.get("top_p"),
            "tool_choice": opts.get("tool_choice", "auto"),
            "tools": opts.get("tools", []),
            "metadata": opts.get("metadata", {}),
            "store": False,
            "usage": _usage(usage) if usage is not None else None,
        }

    def encode_response(self, upstream: dict[str, Any], req: DecodedRequest) -> dict[str, Any]:
        choices = upstream.get("choices") or [{}]
        choice = choices[0]
        message = choice.get("message") or {}
        output: list[dict[str, Any]] = []
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            output.append(_reasoning_item(_new_id("rs"), reasoning, "completed"))
        if isinstance(message.get("content"), str) and message["content"]:
            output.append(_message_item(_new_id("msg"), message["content"], "completed"))
        for tc in message.get("tool_calls") or []:
            fn = tc.get("function") or {}
            output.append(
                _call_item(
                    _new_id("fc"),
                    tc.get("id") or _new_id("call"),
                    fn.get("name") or "",
                    fn.get("arguments") or "",
                    "completed",
                )
            )
        return self.response_object(
            req,
            response_id=_response_id(upstream),
            created_at=upstream.get("created") or int(time.time()),
            model=upstream.get("model"),
            status="completed",
            output=output,
            usage=upstream.get("usage") or {},
            finish_reason=choice.get("finish_reason"),
        )

    def stream_encoder(self, req: DecodedRequest) -> _ResponsesStreamEncoder:
        return _ResponsesStreamEncoder(self, req)

    def error_body(self, error: ProxyError) -> dict[str, Any]:
        err_type, code = _ERROR_SHAPES[error.kind]
        return {"error": {"message": error.message, "type": err_type, "param": error.param, "code": code}}


def _response_id(upstream: dict[str, Any]) -> str:
    upstream_id = upstream.get("id")
    return f"resp_{upstream_id}" if isinstance(upstream_id, str) and upstream_id else _new_id("resp")


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": int(cached), "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
    }


def _message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [_text_part(text)]
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _reasoning_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": item_id, "status": status, "summary": [], "content": content}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


class _ResponsesStreamEncoder:
    """Turns chat.completion.chunk deltas into Responses stream events, one output item at a time."""

    def __init__(self, dialect: OpenAIResponses, req: DecodedRequest) -> None:
        self._dialect = dialect
        self._req = req
        self._seq = 0
        self._started = False
        self._id = _new_id("resp")
        self._created_at = int(time.time())
        self._model: str | None = None
        self._output: list[dict[str, Any]] = []  # finished items
        # The open item: kind ("message" | "reasoning" | "function_call"), its id, accumulated text.
        self._open: dict[str, Any] | None = None
        self._call_index: int | None = None  # upstream tool-call index of the open function_call
        self._usage: dict[str, Any] | None = None
        self._finish_reason: str | None = None

    def _event(self, event_type: str, **fields: Any) -> bytes:
        data = {"type": event_type, "sequence_number": self._seq, **fields}
        self._seq += 1
        return sse(data, event=event_type)

    def _response(self, status: str, **kwargs: Any) -> dict[str, Any]:
        return self._dialect.response_object(
            self._req,
            response_id=self._id,
            created_at=self._created_at,
            model=self._model,
            status=status,
            output=list(self._output),
            **kwargs,
        )

    def _start(self, chunk: dict[str, Any]) -> list[bytes]:
        self._started = True
        if isinstance(chunk.get("id"), str):
            self._id = f"resp_{chunk['id']}"
        self._created_at = chunk.get("created") or self._created_at
        self._model = chunk.get("model")
        return [
            self._event("response.created", response=self._response("in_progress")),
            self._event("response.in_progress", response=self._response("in_progress")),
        ]

    def _close(self) -> list[bytes]:
        item = self._open
        if item is None:
            return []
        self._open = None
        index = len(self._output)
        events: list[bytes] = []
        if item["kind"] == "message":
            part = _text_part(item["text"])
            done = _message_item(item["id"], item["text"], "completed")
            events += [
                self._event(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=item["text"],
                    logprobs=[],
                ),
                self._event(
                    "response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part
                ),
            ]
        elif item["kind"] == "reasoning":
            done = _reasoning_item(item["id"], item["text"], "completed")
            events.append(
                self._event(
                    "response.reasoning_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=item["text"],
                )
            )
        else:
            done = _call_item(item["id"], item["call_id"], item["name"], item["text"], "completed")
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["text"],
                )
            )
        events.append(self._event("response.output_item.done", output_index=index, item=done))
        self._output.append(done)
        return events

    def _open_item(self, kind: str, **extra: Any) -> list[bytes]:
        events = self._close()
        prefix = {"message": "msg", "reasoning": "rs", "function_call": "fc"}[kind]
        item = {"kind": kind, "id": _new_id(prefix), "text": "", **extra}
        self._open = item
        index = len(self._output)
        if kind == "message":
            added = _message_item(item["id"], None, "in_progress")
        elif kind == "reasoning":
            added = _reasoning_item(item["id"], None, "in_progress")
        else:
            added = _call_item(item["id"], item["call_id"], item["name"], "", "in_progress")
        events.append(self._event("response.output_item.added", output_index=index, item=added))
        if kind == "message":
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=_text_part(""),
                )
            )
        return events

    def _text_delta(self, kind: str, text: str) -> list[bytes]:
        events: list[bytes] = []
        if self._open is None or self._open["kind"] != kind:
            events += self._open_item(kind)
        item = self._open
        item["text"] += text
        index = len(self._output)
        if kind == "message":
            events.append(
                self._event(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    delta=text,
                    logprobs=[],
                )
            )
        else:
            events.append(
                self._event(
                    "response.reasoning_text.delta",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    delta=text,
                )
            )
        return events

    def _tool_delta(self, tc: dict[str, Any]) -> list[bytes]:
        events: list[bytes] = []
        fn = tc.get("function") or {}
        index = tc.get("index", 0)
        if self._open is None or self._open["kind"] != "function_call" or self._call_index != index:
            events += self._open_item(
                "function_call", call_id=tc.get("id") or _new_id("call"), name=fn.get("name") or ""
            )
            self._call_index = index
        elif fn.get("name"):
            self._open["name"] += fn["name"]
        arguments = fn.get("arguments")
        if arguments:
            self._open["text"] += arguments
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=self._open["id"],
                    output_index=len(self._output),
                    delta=arguments,
                )
            )
        return events

    def on_chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        events = [] if self._started else self._start(chunk)
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                events += self._text_delta("reasoning", reasoning)
            if isinstance(delta.get("content"), str) and delta["content"]:
                events += self._text_delta("message", delta["content"])
            for tc in delta.get("tool_calls") or []:
                events += self._tool_delta(tc)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return events

    def on_error(self, message: str) -> list[bytes]:
        events = [] if self._started else self._start({})
        events += self._close()
        error = {"code": "server_error", "message": message}
        events.append(self._event("response.failed", response=self._response("failed", error=error)))
        return events

    def on_end(self) -> list[bytes]:
        events = [] if self._started else self._start({})
        events += self._close()
        response = self._response("completed", usage=self._usage or {}, finish_reason=self._finish_reason)
        events.append(self._event("response.completed", response=response))
        return events
