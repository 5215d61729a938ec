"""Google generateContent (`POST /{version}/models/{model}:generateContent` and `:streamGenerateContent`).

Served to gemini-cli (v1beta) and the google-genai SDK (any api_version, e.g. v1 with a custom base URL).
Requests are normalized to chat completions: `contents` (roles user/model; parts text, functionCall,
functionResponse), `systemInstruction`, `tools[].functionDeclarations` (Google's upper-case schema types
lowered to JSON schema), `toolConfig` and `generationConfig`. Google's function calls need not carry ids:
the decoder gives every call a stable id (from its position in the conversation) and pairs each
functionResponse with the preceding model turn's calls by id, else by name and order.

Streaming is always server-sent events (`?alt=sse`, what both clients ask for): text deltas as they
arrive, function calls once complete, and a last event with finishReason and usageMetadata.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from starlette.requests import Request

from harness_rl.proxy.dialects.base import DecodedRequest, Dialect, sse
from harness_rl.proxy.errors import ProxyError

_ACTIONS = {"generateContent": False, "streamGenerateContent": True}
_FINISH_REASONS = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_FUNCTION_CALLING_MODES = {"AUTO": "auto", "ANY": "required", "NONE": "none", "VALIDATED": "auto"}
# Part kinds the engine cannot take; other part keys (thoughtSignature, videoMetadata, ...) are metadata.
_MEDIA_PARTS = {"inlineData", "fileData", "executableCode", "codeExecutionResult"}
# Google Schema keys with no JSON-schema counterpart (dropped when normalizing tool parameters).
_SCHEMA_DROP = ("propertyOrdering", "example", "nullable")


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
            # Google's int64 fields arrive as JSON strings.
            out[key] = int(value) if isinstance(value, str) and value.isdigit() else value
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


class GoogleGenerateContent(Dialect):
    name = "google_generate"
    # One route for both actions: the action after the ':' is how the codec learns whether to stream.
    routes = (("/{version}/models/{model_action}", ("POST",)),)

    def api_key(self, request: Request) -> str | None:
        key = request.headers.get("x-goog-api-key") or request.query_params.get("key")
        if key and key.strip():
            return key.strip()
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        return None

    def decode_request(self, body: Any, path_params: dict[str, Any]) -> DecodedRequest:
        model, _, action = str(path_params.get("model_action", "")).rpartition(":")
        if action not in _ACTIONS or not model:
            message = f"Unknown method '{action}': use generateContent or streamGenerateContent."
            raise ProxyError(404, "invalid_request", message, param="path")
        if not isinstance(body, dict):
            raise _bad("request body must be a JSON object", "body")
        messages: list[dict[str, Any]] = []
        if body.get("systemInstruction") is not None:
            text = "".join(str(p.get("text", "")) for p in _parts(body["systemInstruction"], "systemInstruction"))
            messages.append({"role": "system", "content": text})
        contents = body.get("contents")
        if isinstance(contents, dict):
            contents = [contents]
        if not isinstance(contents, list) or not contents:
            raise _bad("'contents' must be a non-empty list", "contents")
        messages += self._messages(contents)
        upstream: dict[str, Any] = {"messages": messages}
        tools = self._tools(body.get("tools"))
        if tools:
            upstream["tools"] = tools
            upstream.update(self._tool_choice(body.get("toolConfig")))
        upstream.update(self._generation_config(body.get("generationConfig")))
        return DecodedRequest(upstream_body=upstream, stream=_ACTIONS[action], client_model=model)

    def _messages(self, contents: list[Any]) -> list[dict[str, Any]]:
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
                if part.get("thought"):
                    continue  # thought summaries are not part of the conversation the model re-reads
                if "text" in part:
                    texts.append(str(part["text"] or ""))
                elif "functionCall" in part:
                    call = part["functionCall"]
                    if role != "model" or not isinstance(call, dict) or not isinstance(call.get("name"), str):
                        raise _bad(f"{param}.parts[{k}].functionCall needs a model turn and a name", param)
                    args = call.get("args") or {}
                    calls.append(
                        {
                            "id": call.get("id") or tool_call_id(turn, len(calls)),
                            "type": "function",
                            "function": {"name": call["name"], "arguments": json.dumps(args, ensure_ascii=False)},
                        }
                    )
                elif "functionResponse" in part:
                    result = part["functionResponse"]
                    if not isinstance(result, dict) or not isinstance(result.get("name"), str):
                        raise _bad(f"{param}.parts[{k}].functionResponse needs a name", param)
                    results.append(result)
                elif set(part) & _MEDIA_PARTS:
                    kinds = ", ".join(sorted(set(part) & _MEDIA_PARTS))
                    raise _bad(f"{param}.parts[{k}] ({kinds}) is not supported: only text and function parts", param)
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
                        "tool_call_id": self._pair(result, pending, turn),
                        "content": _function_response_text(result.get("response")),
                    }
                )
            if texts or not results:
                messages.append({"role": "user", "content": "".join(texts)})
            if not results:
                pending = []
        return messages

    @staticmethod
    def _pair(result: dict[str, Any], pending: list[dict[str, Any]], turn: int) -> str:
        """The id of the pending call a functionResponse answers (by id, else first same-name, else first)."""
        match = None
        if result.get("id"):
            match = next((c for c in pending if c["id"] == result["id"]), None)
            if match is None:
                return str(result["id"])
        if match is None:
            match = next((c for c in pending if c["function"]["name"] == result["name"]), None)
        if match is None and pending:
            match = pending[0]
        if match is None:
            return tool_call_id(turn, 0)
        pending.remove(match)
        return match["id"]

    @staticmethod
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
            for j, decl in enumerate(tool.get("functionDeclarations") or []):
                if not isinstance(decl, dict) or not isinstance(decl.get("name"), str):
                    raise _bad(f"tools[{i}].functionDeclarations[{j}] needs a name", f"tools[{i}]")
                function: dict[str, Any] = {"name": decl["name"]}
                if decl.get("description"):
                    function["description"] = decl["description"]
                if decl.get("parametersJsonSchema") is not None:
                    function["parameters"] = decl["parametersJsonSchema"]
                elif decl.get("parameters") is not None:
                    function["parameters"] = normalize_schema(decl["parameters"])
                else:
                    function["parameters"] = {"type": "object", "properties": {}}
                out.append({"type": "function", "function": function})
        return out

    @staticmethod
    def _tool_choice(tool_config: Any) -> dict[str, Any]:
        config = (tool_config or {}).get("functionCallingConfig") if isinstance(tool_config, dict) else None
        if not isinstance(config, dict):
            return {}
        choice = _FUNCTION_CALLING_MODES.get(str(config.get("mode", "")).upper())
        allowed = config.get("allowedFunctionNames") or []
        if choice == "required" and isinstance(allowed, list) and len(allowed) == 1:
            return {"tool_choice": {"type": "function", "function": {"name": allowed[0]}}}
        return {"tool_choice": choice} if choice else {}

    @staticmethod
    def _generation_config(config: Any) -> dict[str, Any]:
        if config is None:
            return {}
        if not isinstance(config, dict):
            raise _bad("'generationConfig' must be an object", "generationConfig")
        if config.get("candidateCount") not in (None, 1):
            raise _bad("only candidateCount=1 is supported", "generationConfig.candidateCount")
        names = {
            "maxOutputTokens": "max_tokens",
            "temperature": "temperature",
            "topP": "top_p",
            "topK": "top_k",
            "presencePenalty": "presence_penalty",
            "frequencyPenalty": "frequency_penalty",
            "seed": "seed",
            "stopSequences": "stop",
        }
        out = {ours: config[theirs] for theirs, ours in names.items() if config.get(theirs) is not None}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if schema is not None:
            if "responseSchema" in config and "responseJsonSchema" not in config:
                schema = normalize_schema(schema)
            out["response_format"] = {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
        elif config.get("responseMimeType") == "application/json":
            out["response_format"] = {"type": "json_object"}
        return out

    def encode_response(self, upstream: dict[str, Any], req: DecodedRequest) -> dict[str, Any]:
        choices = upstream.get("choices") or [{}]
        message = choices[0].get("message") or {}
        parts = _function_call_parts(message.get("tool_calls") or [])
        if message.get("content"):
            parts.insert(0, {"text": message["content"]})
        candidate = {
            "content": {"role": "model", "parts": parts or [{"text": ""}]},
            "finishReason": _finish_reason(choices[0].get("finish_reason")),
            "index": 0,
        }
        return self._response([candidate], upstream, req, upstream.get("usage"))

    @staticmethod
    def _response(
        candidates: list[dict[str, Any]],
        upstream: dict[str, Any],
        req: DecodedRequest,
        usage: dict[str, Any] | None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"candidates": candidates}
        if usage:
            out["usageMetadata"] = {
                "promptTokenCount": usage.get("prompt_tokens", 0),
                "candidatesTokenCount": usage.get("completion_tokens", 0),
                "totalTokenCount": usage.get("total_tokens", 0),
            }
        out["modelVersion"] = req.client_model or upstream.get("model")
        if upstream.get("id"):
            out["responseId"] = upstream["id"]
        return out

    def stream_encoder(self, req: DecodedRequest) -> _GoogleStreamEncoder:
        return _GoogleStreamEncoder(self, req)

    def error_body(self, error: ProxyError) -> dict[str, Any]:
        status = _STATUS_NAMES.get(error.status, "INVALID_ARGUMENT" if error.status < 500 else "INTERNAL")
        return {"error": {"code": error.status, "message": error.message, "status": status}}


def _finish_reason(reason: str | None) -> str:
    return _FINISH_REASONS.get(reason or "stop", "OTHER")


def _function_call_parts(tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    parts = []
    for call in tool_calls:
        function = call.get("function") or {}
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError:
            args = {}
        call_part: dict[str, Any] = {"name": function.get("name") or "", "args": args if isinstance(args, dict) else {}}
        if call.get("id"):
            call_part["id"] = call["id"]
        parts.append({"functionCall": call_part})
    return parts


class _GoogleStreamEncoder:
    """Text deltas as they arrive; tool calls gathered and sent with finishReason and usage at the end."""

    def __init__(self, dialect: GoogleGenerateContent, req: DecodedRequest) -> None:
        self._dialect = dialect
        self._req = req
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._finished = False
        self._upstream: dict[str, Any] = {"id": f"resp-{uuid.uuid4().hex}"}

    def _event(self, parts: list[dict[str, Any]], finish: str | None, usage: dict[str, Any] | None) -> bytes:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}} if parts else {}
        candidate["index"] = 0
        if finish is not None:
            candidate["finishReason"] = _finish_reason(finish)
        return sse(self._dialect._response([candidate], self._upstream, self._req, usage))

    def on_chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        if chunk.get("id"):
            self._upstream["id"] = chunk["id"]
        if chunk.get("model"):
            self._upstream["model"] = chunk["model"]
        events = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                events.append(self._event([{"text": delta["content"]}], None, None))
            for tc in delta.get("tool_calls") or []:
                slot = self._calls.setdefault(tc.get("index", len(self._calls)), {"function": {"arguments": ""}})
                if tc.get("id"):
                    slot["id"] = tc["id"]
                function = tc.get("function") or {}
                if function.get("name"):
                    slot["function"]["name"] = function["name"]
                slot["function"]["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        if chunk.get("usage") and not chunk.get("choices"):
            events += self._final(chunk["usage"])
        return events

    def _final(self, usage: dict[str, Any] | None) -> list[bytes]:
        if self._finished:
            return []
        self._finished = True
        calls = [self._calls[i] for i in sorted(self._calls)]
        return [self._event(_function_call_parts(calls), self._finish or "stop", usage)]

    def on_error(self, message: str) -> list[bytes]:
        # google-genai raises APIError for a data event that is an {"error": ...} object.
        return [sse(self._dialect.error_body(ProxyError(502, "upstream_error", message)))]

    def on_end(self) -> list[bytes]:
        return self._final(None)
