"""OpenAI Responses streaming: chat.completion.chunk deltas as the full event sequence codex insists on.

response.created, response.in_progress, then per output item output_item.added, its content_part / text /
arguments deltas and dones, output_item.done, and finally response.completed with usage (or
response.failed when the engine fails mid-stream).
"""

from __future__ import annotations

import time
from typing import Any

from harness_rl.proxy.dialects.base import DecodedRequest, sse
from harness_rl.proxy.dialects.responses_reply import (
    call_item,
    message_item,
    new_id,
    reasoning_item,
    response_object,
    text_part,
)


class ResponsesStreamEncoder:
    """Turns chat.completion.chunk deltas into Responses stream events, one output item at a time."""

    def __init__(self, req: DecodedRequest) -> None:
        self._req = req
        self._seq = 0
        self._started = False
        self._id = new_id("resp")
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
        return response_object(
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
            part = text_part(item["text"])
            done = message_item(item["id"], item["text"], "completed")
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
            done = reasoning_item(item["id"], item["text"], "completed")
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
            done = call_item(item["id"], item["call_id"], item["name"], item["text"], "completed")
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
        item = {"kind": kind, "id": new_id(prefix), "text": "", **extra}
        self._open = item
        index = len(self._output)
        if kind == "message":
            added = message_item(item["id"], None, "in_progress")
        elif kind == "reasoning":
            added = reasoning_item(item["id"], None, "in_progress")
        else:
            added = call_item(item["id"], item["call_id"], item["name"], "", "in_progress")
        events.append(self._event("response.output_item.added", output_index=index, item=added))
        if kind == "message":
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=text_part(""),
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
                "function_call", call_id=tc.get("id") or new_id("call"), name=fn.get("name") or ""
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
