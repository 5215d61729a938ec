"""What one engine call sampled, read from vLLM's chat-completions reply or stream.

Upstream is always vLLM's chat-completions endpoint with ``return_token_ids`` and ``logprobs`` on, so this
is independent of the client's dialect. Where vLLM 0.32 puts the token ids
(vllm/entrypoints/openai/chat_completion/serving.py):

- non-streaming: ``prompt_token_ids`` at the top level, ``choices[i].token_ids`` and
  ``choices[i].logprobs.content[j].logprob``, one log-prob entry per token id;
- streaming: ``prompt_token_ids`` only on the first chunk (the role chunk, one per choice); every later
  chunk carries ``choices[i].token_ids`` with that step's delta token ids and ``logprobs.content`` for
  exactly those tokens. While a tool parser holds text back the chunk is still sent, with an empty delta,
  so no token is lost. An error mid-stream arrives as a ``{"error": {...}}`` chunk before ``[DONE]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class CaptureError(Exception):
    """The engine's reply lacks what training needs (token ids, aligned log-probs)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class CallCapture:
    """Accumulates one call's tokens, log-probs, tool calls and usage."""

    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] = field(default_factory=list)
    logprobs_seen: bool = False
    finish_reason: str | None = None
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    _tool_deltas: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_response(cls, data: dict[str, Any]) -> CallCapture:
        """Reads a non-streaming chat.completion reply."""
        cap = cls(model=data.get("model"), usage=dict(data.get("usage") or {}))
        cap.prompt_token_ids = data.get("prompt_token_ids")
        choices = data.get("choices") or []
        if choices:
            choice = choices[0]
            cap.completion_token_ids = choice.get("token_ids")
            cap._add_logprobs(choice.get("logprobs"))
            cap.finish_reason = choice.get("finish_reason")
            message = choice.get("message") or {}
            cap.content = message.get("content") or ""
            cap.tool_calls = [dict(tc) for tc in message.get("tool_calls") or []]
        return cap

    def feed_chunk(self, chunk: dict[str, Any]) -> None:
        """Reads one chat.completion.chunk of a stream (choice 0 only; the proxy asks for n=1)."""
        if self.model is None:
            self.model = chunk.get("model")
        if chunk.get("prompt_token_ids") is not None and self.prompt_token_ids is None:
            self.prompt_token_ids = list(chunk["prompt_token_ids"])
        if chunk.get("usage"):
            self.usage = dict(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            if choice.get("token_ids") is not None:
                if self.completion_token_ids is None:
                    self.completion_token_ids = []
                self.completion_token_ids.extend(choice["token_ids"])
            self._add_logprobs(choice.get("logprobs"))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            self.content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                self._merge_tool_delta(tc)

    def _add_logprobs(self, logprobs: dict[str, Any] | None) -> None:
        if not logprobs or logprobs.get("content") is None:
            return
        self.logprobs_seen = True
        self.completion_logprobs.extend(float(entry["logprob"]) for entry in logprobs["content"])

    def _merge_tool_delta(self, tc: dict[str, Any]) -> None:
        slot = self._tool_deltas.setdefault(
            tc.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if tc.get("id"):
            slot["id"] = tc["id"]
        if tc.get("type"):
            slot["type"] = tc["type"]
        fn = tc.get("function") or {}
        slot["function"]["name"] += fn.get("name") or ""
        slot["function"]["arguments"] += fn.get("arguments") or ""
        self.tool_calls = [self._tool_deltas[i] for i in sorted(self._tool_deltas)]

    def validate(self) -> None:
        """Checks the capture can become a training node.

        Raises:
            CaptureError: kind "missing_token_ids" when the engine sent no prompt or completion ids (was it
                started without return_token_ids support?), "logprobs_mismatch" when log-probs are missing
                or do not align one to one with the completion ids.
        """
        if self.prompt_token_ids is None or self.completion_token_ids is None:
            missing = [
                name
                for name, value in (
                    ("prompt_token_ids", self.prompt_token_ids),
                    ("completion token_ids", self.completion_token_ids),
                )
                if value is None
            ]
            raise CaptureError("missing_token_ids", f"engine reply has no {' or '.join(missing)}")
        if not self.logprobs_seen and self.completion_token_ids:
            raise CaptureError("logprobs_mismatch", "engine reply has no log-probs")
        if len(self.completion_logprobs) != len(self.completion_token_ids):
            raise CaptureError(
                "logprobs_mismatch",
                f"{len(self.completion_token_ids)} completion token ids but {len(self.completion_logprobs)} log-probs",
            )
