"""Google generateContent request decoding: a `generateContent` body as one chat-completions request.

`contents` (roles user/model; parts text, functionCall, functionResponse), `systemInstruction`,
`tools[].functionDeclarations` (Google's upper-case schema types lowered to JSON schema), `toolConfig` and
`generationConfig` are translated. Google's function calls need not carry ids: the decoder gives every
call a stable id (from its position in the conversation) and pairs each functionResponse with the
preceding model turn's calls by id, else by name and order.
"""

from __future__ import annotations

import json
from typing import Any

from harness_rl.proxy.dialects.base import DecodedRequest
from harness_rl.proxy.dialects.wire_json import check_json_body
from harness_rl.proxy.errors import ProxyError

#: The two actions after the ':' of the path, and whether each streams.
ACTIONS = {"generateContent": False, "streamGenerateContent": True}
_FUNCTION_CALLING_MODES = {"AUTO": "auto", "ANY": "required", "NONE": "none", "VALIDATED": "auto"}
# Part kinds the engine cannot take; other part keys (thoughtSignature, videoMetadata, ...) are metadata.
_MEDIA_PARTS = {"inlineData", "fileData", "executableCode", "codeExecutionResult"}
# Google Schema keys with no JSON-schema counterpart (dropped when normalizing tool parameters).
_SCHEMA_DROP = ("propertyOrdering", "example", "nullable")
# generationConfig field -> (chat field, accepted JSON types). Google's API refuses other types, and
# passing them on would fail in the sampling policy or the engine instead of naming the field.
_GENERATION_FIELDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "maxOutputTokens": ("max_tokens", (int,)),
    "temperature": ("temperature", (int, float)),
    "topP": ("top_p", (int, float)),
    "topK": ("top_k", (int, float)),
    "presencePenalty": ("presence_penalty", (int, float)),
    "frequencyPenalty": ("frequency_penalty", (int, float)),
    "seed": ("seed", (int,)),
}


def _bad(message: str, param: str) -> ProxyError:
    return ProxyError(400, "invalid_request", message, param=param)


def tool_call_id(turn: int, index: int) -> str:
    """The id given to the index-th functionCall (without an id) of the turn-th content."""
    return f"call_{turn}_{index}"


def normalize_schema(schema: Any) -> Any:
    """Google's OpenAPI-subset Schema ("OBJECT", "STRING", nullable, ...) as lower-case JSON schema."""
    if isinstance(schema, list):
        return [normalize_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_DROP:
            continue
        if key == "type" and isinstance(value, str):
            if value.upper() == "TYPE_UNSPECIFIED":
                continue
            out["type"] = value.lower()
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: normalize_schema(sub) for name, sub in value.items()}
        elif key in ("items", "anyOf", "oneOf", "allOf", "not", "additionalProperties"):
            out[key] = normalize_schema(value)
        elif key in ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"):
            # Google's int64 fields arrive as JSON strings. isdigit() alone also accepts digits int() refuses
            # (superscripts), hence the ASCII check.
            out[key] = int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else value
        else:
            out[key] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _function_response_text(response: Any) -> str:
    """A functionResponse's `response` as tool-message text ({"output": "..."} becomes its string)."""
    if isinstance(response, dict) and set(response) == {"output"} and isinstance(response["output"], str):
        return response["output"]
    if isinstance(response, str):
        return response
    return json.dumps(response, ensure_ascii=False)


def _parts(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    if not isinstance(content, dict):
        raise _bad(f"'{param}' must be an object with 'parts'", param)
    parts = content.get("parts") or []
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise _bad(f"'{param}.parts' must be a list of objects", f"{param}.parts")
    return parts


def _part_text(part: dict[str, Any], param: str) -> str:
    text = part["text"]
    if text is not None and not isinstance(text, str):
        raise _bad(f"'{param}.text' must be a string", f"{param}.text")
    return text or ""


def _optional_id(value: dict[str, Any], param: str) -> str | None:
    call_id = value.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise _bad(f"'{param}.id' must be a string", f"{param}.id")
    return call_id or None


def _function_call(part: dict[str, Any], role: Any, turn: int, index: int, param: str) -> dict[str, Any]:
    call = part["functionCall"]
    if role != "model" or not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise _bad(f"{param}.functionCall needs a model turn and a name", param)
    args = call.get("args")
    if args is not None and not isinstance(args, dict):
        raise _bad(f"'{param}.functionCall.args' must be an object", f"{param}.functionCall.args")
    return {
        "id": _optional_id(call, f"{param}.functionCall") or tool_call_id(turn, index),
        "type": "function",
        "function": {"name": call["name"], "arguments": json.dumps(args or {}, ensure_ascii=False)},
    }


def _pair(result: dict[str, Any], pending: list[dict[str, Any]], turn: int) -> str:
    """The id of the pending call a functionResponse answers (by id, else first same-name, else first)."""
    match = None
    if result.get("id"):
        match = next((c for c in pending if c["id"] == result["id"]), None)
        if match is None:
            return result["id"]
    if match is None:
        match = next((c for c in pending if c["function"]["name"] == result["name"]), None)
    if match is None and pending:
        match = pending[0]
    if match is None:
        return tool_call_id(turn, 0)
    pending.remove(match)
    return match["id"]


def _messages(contents: list[Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # the last model turn's calls not yet answered
    for turn, content in enumerate(contents):
        param = f"contents[{turn}]"
        parts = _parts(content, param)
        role = (content.get("role") if isinstance(content, dict) else None) or "user"
        if role not in ("user", "model", "function", "tool"):
            raise _bad(f"{param}.role must be 'user' or 'model'", f"{param}.role")
        texts, calls, results = [], [], []
        for k, part in enumerate(parts):
            part_param = f"{param}.parts[{k}]"
            if part.get("thought"):
                continue  # thought summaries are not part of the conversation the model re-reads
            if "text" in part:
                texts.append(_part_text(part, part_param))
            elif "functionCall" in part:
                calls.append(_function_call(part, role, turn, len(calls), part_param))
            elif "functionResponse" in part:
                result = part["functionResponse"]
                if not isinstance(result, dict) or not isinstance(result.get("name"), str):
                    raise _bad(f"{part_param}.functionResponse needs a name", param)
                _optional_id(result, f"{part_param}.functionResponse")
                results.append(result)
            elif set(part) & _MEDIA_PARTS:
                kinds = ", ".join(sorted(set(part) & _MEDIA_PARTS))
                raise _bad(f"{part_param} ({kinds}) is not supported: only text and function parts", param)
        if role == "model":
            message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or (None if calls else "")}
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
            pending = list(calls)
            continue
        for result in results:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": _pair(result, pending, turn),
                    "content": _function_response_text(result.get("response")),
                }
            )
        if texts or not results:
            messages.append({"role": "user", "content": "".join(texts)})
        if not results:
            pending = []
    return messages


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _bad(f"tools[{i}] must be an object", f"tools[{i}]")
        # Built-in tools (googleSearch, codeExecution, ...) have no engine counterpart and are ignored.
        declarations = tool.get("functionDeclarations") or []
        if not isinstance(declarations, list):
            raise _bad(f"tools[{i}].functionDeclarations must be a list", f"tools[{i}].functionDeclarations")
        for j, decl in enumerate(declarations):
            param = f"tools[{i}].functionDeclarations[{j}]"
            if not isinstance(decl, dict) or not isinstance(decl.get("name"), str):
                raise _bad(f"{param} needs a name", param)
            function: dict[str, Any] = {"name": decl["name"]}
            if decl.get("description") is not None:
                if not isinstance(decl["description"], str):
                    raise _bad(f"{param}.description must be a string", f"{param}.description")
                if decl["description"]:
                    function["description"] = decl["description"]
            # Protobuf JSON accepts field names in snake case too; the Python SDK sends parameters_json_schema.
            decl = {("parametersJsonSchema" if k == "parameters_json_schema" else k): v for k, v in decl.items()}
            schema_key = "parametersJsonSchema" if decl.get("parametersJsonSchema") is not None else "parameters"
            schema = decl.get(schema_key)
            if schema is not None and not isinstance(schema, dict):
                raise _bad(f"{param}.{schema_key} must be an object", f"{param}.{schema_key}")
            if schema is None:
                function["parameters"] = {"type": "object", "properties": {}}
            else:
                function["parameters"] = schema if schema_key == "parametersJsonSchema" else normalize_schema(schema)
            out.append({"type": "function", "function": function})
    return out


def _schema_adherent(tool_config: Any) -> bool:
    """Whether the mode promises function calls that adhere to their schema (ANY and VALIDATED do)."""
    config = (tool_config or {}).get("functionCallingConfig") if isinstance(tool_config, dict) else None
    return isinstance(config, dict) and str(config.get("mode", "")).upper() in ("ANY", "VALIDATED")


def _tool_choice(tool_config: Any) -> dict[str, Any]:
    config = (tool_config or {}).get("functionCallingConfig") if isinstance(tool_config, dict) else None
    if not isinstance(config, dict):
        return {}
    choice = _FUNCTION_CALLING_MODES.get(str(config.get("mode", "")).upper())
    allowed = config.get("allowedFunctionNames") or []
    if choice == "required" and isinstance(allowed, list) and len(allowed) == 1:
        if not isinstance(allowed[0], str):
            param = "toolConfig.functionCallingConfig.allowedFunctionNames"
            raise _bad(f"'{param}' must be a list of strings", param)
        return {"tool_choice": {"type": "function", "function": {"name": allowed[0]}}}
    return {"tool_choice": choice} if choice else {}


def _generation_config(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise _bad("'generationConfig' must be an object", "generationConfig")
    if config.get("candidateCount") not in (None, 1):
        raise _bad("only candidateCount=1 is supported", "generationConfig.candidateCount")
    out = {}
    for theirs, (ours, types) in _GENERATION_FIELDS.items():
        value = config.get(theirs)
        if value is None:
            continue
        if not isinstance(value, types) or isinstance(value, bool):
            kind = "an integer" if types == (int,) else "a number"
            raise _bad(f"'generationConfig.{theirs}' must be {kind}", f"generationConfig.{theirs}")
        out[ours] = value
    stop = config.get("stopSequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _bad("'generationConfig.stopSequences' must be a list of strings", "generationConfig.stopSequences")
        out["stop"] = stop
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if schema is not None:
        if "responseSchema" in config and "responseJsonSchema" not in config:
            schema = normalize_schema(schema)
        out["response_format"] = {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    elif config.get("responseMimeType") == "application/json":
        out["response_format"] = {"type": "json_object"}
    return out


def decode_generate_request(body: Any, path_params: dict[str, Any]) -> DecodedRequest:
    """Validates and translates a generateContent body; the path's action says whether to stream.

    Raises:
        ProxyError: 404 for an unknown action, 400 naming the bad field.
    """
    model, _, action = str(path_params.get("model_action", "")).rpartition(":")
    if action not in ACTIONS or not model:
        message = f"Unknown method '{action}': use generateContent or streamGenerateContent."
        raise ProxyError(404, "invalid_request", message, param="path")
    body = check_json_body(body)
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object", "body")
    messages: list[dict[str, Any]] = []
    if body.get("systemInstruction") is not None:
        parts = _parts(body["systemInstruction"], "systemInstruction")
        text = "".join(_part_text(p, f"systemInstruction.parts[{k}]") for k, p in enumerate(parts) if "text" in p)
        messages.append({"role": "system", "content": text})
    contents = body.get("contents")
    if isinstance(contents, dict):
        contents = [contents]
    if not isinstance(contents, list) or not contents:
        raise _bad("'contents' must be a non-empty list", "contents")
    messages += _messages(contents)
    upstream: dict[str, Any] = {"messages": messages}
    tools = _tools(body.get("tools"))
    if tools:
        upstream["tools"] = tools
        upstream.update(_tool_choice(body.get("toolConfig")))
        if _schema_adherent(body.get("toolConfig")):
            for tool in tools:
                tool["function"]["strict"] = True
    upstream.update(_generation_config(body.get("generationConfig")))
    return DecodedRequest(upstream_body=upstream, stream=ACTIONS[action], client_model=model)
