"""Anthropic Messages streaming: chat.completion.chunk objects as Anthropic stream events
(`message_start`, `content_block_start/delta/stop`, `message_delta`, `message_stop`)."""

from __future__ import annotations

import json
import logging
from typing import Any

from harness_rl.proxy.dialects.anthropic_reply import (
    error_body,
    matched_stop_sequence,
    message_id,
    new_tool_use_id,
    stop_reason,
    usage,
)
from harness_rl.proxy.dialects.anthropic_request import tool_input
from harness_rl.proxy.dialects.base import DecodedRequest, sse
from harness_rl.proxy.errors import ProxyError

log = logging.getLogger(__name__)


def _event(data: dict[str, Any]) -> bytes:
    return sse(data, event=data["type"])


class MessagesStreamEncoder:
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
            "id": message_id(chunk.get("id")),
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
                self._stop_sequence = matched_stop_sequence(choice, self._req)
                events += self._close()
        return events

    def _tool_delta(self, call: dict[str, Any]) -> list[bytes]:
        events: list[bytes] = []
        chat_index = call.get("index", 0)
        function = call.get("function") or {}
        if chat_index not in self._tool_blocks or (call.get("id") and self._open != self._tool_blocks[chat_index]):
            block = {
                "type": "tool_use",
                "id": call.get("id") or new_tool_use_id(),
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
        return [sse(error_body(ProxyError(502, "upstream_error", message)), event="error")]

    def on_end(self) -> list[bytes]:
        events = self._start({}) + self._close()
        final_usage = usage(self._usage)
        if not self._usage:
            final_usage["input_tokens"] = self._input_tokens
        events.append(
            _event(
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": stop_reason(self._finish_reason, self._has_tool_use, self._stop_sequence),
                        "stop_sequence": self._stop_sequence,
                    },
                    "usage": final_usage,
                }
            )
        )
        events.append(_event({"type": "message_stop"}))
        return events
