"""OpenAI Responses request decoding: a `/v1/responses` body as one chat-completions request.

The `input` item list becomes chat messages: `instructions` becomes a leading system message,
developer/system message items become system messages, `function_call` items become assistant
`tool_calls` (merged into the preceding assistant message, as the engine rendered them), and
`function_call_output` items become tool messages; reasoning items are dropped. Only `function` tools
reach the engine (hosted tools such as web_search and codex's `namespace` tool are dropped). The proxy
is stateless: `previous_response_id` is refused.
"""

from __future__ import annotations

from typing import Any

from harness_rl.proxy.dialects.base import DecodedRequest
from harness_rl.proxy.dialects.wire_json import check_json_body
from harness_rl.proxy.errors import ProxyError

_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
_SYSTEM_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# Items that carry nothing the engine should see again.
_DROPPED_ITEMS = ("reasoning",)


def _bad(message: str, param: str) -> ProxyError:
    return ProxyError(400, "invalid_request", message, param=param)


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
            role = _SYSTEM_ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
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
        strict = tool.get("strict")
        echoed.append({"type": "function", **function, "strict": strict if isinstance(strict, bool) else None})
        if strict is True:
            # vLLM then pins the sampled arguments to the schema (a structural tag), as the API promises.
            function["strict"] = True
        chat_tools.append({"type": "function", "function": function})
    return chat_tools, echoed


def _decode_tool_choice(choice: Any, tool_names: set[str]) -> Any:
    """Responses tool_choice -> chat tool_choice; None when the engine should use its default."""
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        if not isinstance(choice.get("name"), str) or choice["name"] not in tool_names:
            raise _bad(f"tool_choice names unknown function {choice.get('name')!r}", "tool_choice")
        return {"type": "function", "function": {"name": choice["name"]}}
    if choice is None or isinstance(choice, dict):
        return None  # hosted-tool or allowed_tools choices: leave the engine's default
    raise _bad("'tool_choice' must be 'auto', 'none', 'required' or a function choice", "tool_choice")


def _echoed_tool_choice(choice: Any, chat_choice: Any) -> Any:
    """The tool_choice the Responses object reports: what the engine was really asked for.

    A hosted-tool or allowed_tools choice left the engine on its default ("auto"); echoing the client's
    object instead would also break clients that parse the echo strictly (the openai SDK refuses unknown
    tool_choice objects in a `response`).
    """
    if isinstance(chat_choice, dict):
        return {"type": "function", "name": chat_choice["function"]["name"]}
    return chat_choice if isinstance(chat_choice, str) else "auto"


def _decode_metadata(metadata: Any) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _bad("'metadata' must be an object of strings", "metadata")
    return metadata


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


def decode_responses_request(body: Any) -> DecodedRequest:
    """Validates and translates a Responses request body. Raises ProxyError(400) naming the bad field."""
    body = check_json_body(body)
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
    # Checked even without function tools, so that what the response echoes is always valid.
    choice = _decode_tool_choice(body.get("tool_choice"), {t["function"]["name"] for t in chat_tools})
    if chat_tools:
        upstream["tools"] = chat_tools
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
            if not isinstance(body[key], (int, float)) or isinstance(body[key], bool):
                raise _bad(f"'{key}' must be a number", key)
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
            "tool_choice": _echoed_tool_choice(body.get("tool_choice"), choice),
            "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
            "instructions": body.get("instructions"),
            "max_output_tokens": max_tokens,
            "temperature": body.get("temperature"),
            "top_p": body.get("top_p"),
            "metadata": _decode_metadata(body.get("metadata")),
        },
    )
