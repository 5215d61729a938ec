"""A scripted stand-in for vLLM's OpenAI chat-completions server (test double for the engine).

It imitates vLLM 0.32's reply shapes with `return_token_ids` and `logprobs`: `prompt_token_ids` at the
top level (first chunk when streaming), `token_ids` per choice (per chunk: that step's tokens), one
`logprobs.content` entry per token, held-back tool-parser steps as chunks with an empty delta, the final
usage chunk, `[DONE]`. Tokenization is the toy chat template of ``harness_rl.proxy.toy_chat_template``, which is
prefix-consistent the way a real chat template is: a conversation's next prompt starts with the previous
prompt plus the previous completion.

Used by unit tests (with uvicorn on port 0), by harness tests that need a scripted model, by the harness
benchmark and by ``python -m harness_rl.harnesses check``. Its fast mode for benchmarks is ``fast.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from harness_rl.proxy.toy_chat_template import END, render_assistant, render_prompt, tokenize_text


@dataclass
class Reply:
    """One scripted model reply: plain text, or tool calls as (name, arguments dict) pairs."""

    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def token_logprob(position: int, token_id: int) -> float:
    """Deterministic fake log-prob of a sampled token."""
    return -((token_id * 31 + position * 7) % 97) / 100.0


class FakeEngine:
    """Scripted fake vLLM. `app` is the ASGI app; `requests` records every request body received.

    Args:
        replies: replies to give in order; when exhausted, replies echo "ok".
        model: the served model name.
        max_model_len: the context length its /v1/models card reports.
        chunk_delay_s: pause between streamed chunks (to observe incremental relaying).
        omit_token_ids: behave like an engine that ignores return_token_ids.
        fail_after_chunks: when streaming, drop the connection after this many chunks.
        status: answer every request with this HTTP error status instead.
        context_limit: enforce this context length as vLLM 0.32 does (see proxy/context.py): a prompt over it
            is refused with vLLM's 400, a prompt of exactly it gets "max_tokens must be at least 1, got 0", and
            an output budget that does not fit is clamped (finish_reason "length").
        refuse_long_output: with ``context_limit``, refuse an output budget that does not fit as vLLM 0.7-0.1x
            did ("'max_tokens' or 'max_completion_tokens' is too large") instead of clamping it.
    """

    def __init__(
        self,
        replies: list[Reply] | None = None,
        *,
        model: str = "base-model",
        max_model_len: int = 8192,
        chunk_delay_s: float = 0.0,
        omit_token_ids: bool = False,
        fail_after_chunks: int | None = None,
        status: int | None = None,
    ) -> None:
        self.model = model
        self.max_model_len = max_model_len
        self.reset(
            replies,
            chunk_delay_s=chunk_delay_s,
            omit_token_ids=omit_token_ids,
            fail_after_chunks=fail_after_chunks,
            status=status,
        )
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    def reset(
        self,
        replies: list[Reply] | None = None,
        *,
        chunk_delay_s: float = 0.0,
        omit_token_ids: bool = False,
        fail_after_chunks: int | None = None,
        status: int | None = None,
        context_limit: int | None = None,
        refuse_long_output: bool = False,
        reply_delay_s: float = 0.0,
    ) -> FakeEngine:
        """Replaces the script and behaviour and forgets recorded requests (reuse one server across tests).

        ``reply_delay_s`` holds every reply (and a stream's headers) that long: a stalled engine.
        """
        self.reply_delay_s = reply_delay_s
        self.replies = list(replies or [])
        self.chunk_delay_s = chunk_delay_s
        self.omit_token_ids = omit_token_ids
        self.fail_after_chunks = fail_after_chunks
        self.status = status
        self.context_limit = context_limit
        self.refuse_long_output = refuse_long_output
        self.requests: list[dict[str, Any]] = []
        return self

    async def _models(self, request: Request) -> Response:
        card = {"id": self.model, "object": "model", "parent": None, "max_model_len": self.max_model_len}
        return JSONResponse({"object": "list", "data": [card]})

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        if self.reply_delay_s:
            await asyncio.sleep(self.reply_delay_s)
        if self.status is not None:
            error = {
                "message": "scripted failure",
                "type": "BadRequestError",
                "param": None,
                "code": self.status,
            }
            return JSONResponse({"error": error}, status_code=self.status)
        prompt = render_prompt(body["messages"])
        room = None
        if self.context_limit is not None:
            room = self._context_room(len(prompt), body.get("max_tokens"))
            if isinstance(room, Response):
                return room
        reply = self.replies.pop(0) if self.replies else Reply(text="ok")
        text = render_assistant(reply.text, reply.tool_calls)
        completion = tokenize_text(text)[: body.get("max_tokens") or None] + [END]
        finish = "tool_calls" if reply.tool_calls else "stop"
        if room is not None and len(completion) > room:
            # Cut off by the context: the reply is the text sampled so far (a cut tool call is just text).
            completion, finish = completion[:room], "length"
            reply = Reply(text="".join(map(chr, completion)))
        tool_calls = [
            {
                "id": f"call_{uuid.uuid4().hex[:8]}",
                "type": "function",
                "function": {"name": n, "arguments": json.dumps(a, sort_keys=True)},
            }
            for n, a in reply.tool_calls
        ]
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(completion)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if body.get("stream"):
            return StreamingResponse(
                self._stream(body, prompt, completion, reply, tool_calls, finish, usage),
                media_type="text/event-stream",
            )
        logprobs = [self._logprob_entry(i, t) for i, t in enumerate(completion)]
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        choice = {"index": 0, "message": message, "finish_reason": finish, "stop_reason": None}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": logprobs}
        out = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [choice],
            "usage": usage,
        }
        if body.get("return_token_ids") and not self.omit_token_ids:
            out["prompt_token_ids"] = prompt
            choice["token_ids"] = completion
        return JSONResponse(out)

    def _context_room(self, n_prompt: int, max_tokens: int | None) -> int | Response:
        """The output budget vLLM 0.32 would grant, or its 400 (messages as in vllm/renderers/params.py)."""
        limit = self.context_limit
        assert limit is not None
        if max_tokens is not None and max_tokens > limit and not self.refuse_long_output:
            return _bad_request(f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. "
                                "Please request fewer output tokens.", "max_tokens")  # fmt: skip
        if n_prompt > limit:
            return _bad_request(f"This model's maximum context length is {limit} tokens. However, your prompt "
                                f"contains {n_prompt} input tokens, which exceeds this limit even without any output "
                                "tokens. Please reduce the length of the input prompt.", "input_tokens")  # fmt: skip
        room = limit - n_prompt if max_tokens is None else min(max_tokens, limit - n_prompt)
        if self.refuse_long_output and max_tokens is not None and n_prompt + max_tokens > limit:
            return _bad_request(f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
                                f"maximum context length is {limit} tokens and your request has {n_prompt} input "
                                f"tokens ({max_tokens} > {limit} - {n_prompt}).", None)  # fmt: skip
        if room < 1:
            return _bad_request(f"max_tokens must be at least 1, got {room}.", "max_tokens")
        return room

    @staticmethod
    def _logprob_entry(position: int, token_id: int) -> dict[str, Any]:
        token = chr(token_id) if token_id < 0x110000 else "<|im_end|>"
        return {
            "token": token,
            "logprob": token_logprob(position, token_id),
            "bytes": list(token.encode()),
            "top_logprobs": [],
        }

    async def _stream(self, body, prompt, completion, reply, tool_calls, finish, usage):
        ids = not self.omit_token_ids and body.get("return_token_ids")
        base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": 0}
        base["model"] = body["model"]
        first = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        if ids:
            first["prompt_token_ids"] = prompt
        chunks = [first]
        n_text = len(reply.text)
        for pos, token_id in enumerate(completion):
            last = pos == len(completion) - 1
            if pos < n_text:
                delta: dict[str, Any] = {"content": chr(token_id)}
            elif last or not tool_calls:
                delta = {}
            elif pos == n_text:
                # Like vLLM's hermes parser: the call appears at once after being held back.
                delta = {"tool_calls": [{"index": i, **tc} for i, tc in enumerate(tool_calls)]}
            else:
                delta = {}  # tool-call markup tokens held back by the parser
            choice = {"index": 0, "delta": delta, "finish_reason": finish if last else None}
            if body.get("logprobs"):
                choice["logprobs"] = {"content": [self._logprob_entry(pos, token_id)]}
            if ids:
                choice["token_ids"] = [token_id]
            chunks.append({**base, "choices": [choice]})
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "choices": [], "usage": usage})
        for i, chunk in enumerate(chunks):
            if self.fail_after_chunks is not None and i >= self.fail_after_chunks:
                raise ConnectionError("scripted engine crash mid-stream")
            yield f"data: {json.dumps(chunk)}\n\n"
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
        yield "data: [DONE]\n\n"


def _bad_request(message: str, param: str | None) -> Response:
    """vLLM's 400 body (``ErrorResponse``)."""
    return JSONResponse({"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}, 400)
