"""The fake vLLM's fast mode, for the proxy benchmark: vLLM's reply shapes at a fraction of FakeEngine's cost.

`python -m harness_rl.testkit.fake_vllm.fast --port 0 [--token-delay-ms 5]` prints its URL and serves
`POST /v1/chat/completions` until SIGINT/SIGTERM.

Replies have vLLM 0.32's shapes with `return_token_ids` and `logprobs` (see harness_rl/proxy/capture.py):
`prompt_token_ids` (top level, or on the first chunk), per-choice/per-chunk `token_ids`, one
`logprobs.content` entry per token, a tool call (streamed at once after held-back chunks, like vLLM's hermes
parser), the trailing usage chunk and `[DONE]`. Tokens are words, each mapped to a vocabulary-sized id by
CRC32, and the toy chat template is prefix-consistent like a real one, so the proxy's rollout graph links a
session's calls into one chain.

It is a bare ASGI callable rather than a Starlette app because the benchmark compares the proxy against
this server: every microsecond spent here dilutes the comparison, and routing one path needs no framework.
It is a class of its own rather than a flag on FakeEngine because it also tokenizes differently (a word per
token, not a character) and writes its own replies (random words and one ``bash`` call, not a script).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import zlib
from typing import Any

import uvicorn

START, END = 151_644, 151_645  # turn delimiters, like <|im_start|> / <|im_end|>
ROLE_IDS = {"system": 151_650, "user": 151_651, "assistant": 151_652, "tool": 151_653}
VOCAB_LOW, VOCAB_SIZE = 1_000, 150_000
REPLY_VOCAB = [f"w{i}" for i in range(2_000)]
_CACHE_LIMIT = 200_000  # memoized message tokenizations; cleared wholesale when full
_DUMPS = json.JSONEncoder(separators=(",", ":")).encode


def word_id(word: str) -> int:
    """A word's token id (stable across processes, unlike hash())."""
    return VOCAB_LOW + zlib.crc32(word.encode()) % VOCAB_SIZE


def render_tool_call(name: str, arguments: str) -> str:
    """The text a model emits for one tool call (what the engine's tool parser turns into a tool_calls delta)."""
    return f"<tool_call> {name} {arguments} </tool_call>"


class FastFakeEngine:
    """The ASGI app. Every reply has `reply_words` words of text and one `bash` tool call.

    Args:
        reply_words: words of assistant text per reply (one token each).
        token_delay_s: engine-like pause before each streamed token (the first one models prefill).
        model: served model name.
    """

    def __init__(self, *, reply_words: int = 24, token_delay_s: float = 0.0, model: str = "bench-model") -> None:
        self.reply_words = reply_words
        self.token_delay_s = token_delay_s
        self.model = model
        self._token_cache: dict[str, list[int]] = {}

    def _tokens(self, text: str) -> list[int]:
        ids = self._token_cache.get(text)
        if ids is None:
            if len(self._token_cache) >= _CACHE_LIMIT:
                self._token_cache.clear()
            ids = self._token_cache[text] = [word_id(w) for w in text.split()]
        return ids

    def render_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        """Toy chat template: START role content [tool calls] END per message, then START assistant."""
        ids: list[int] = []
        for message in messages:
            ids += (START, ROLE_IDS.get(message["role"], 151_659))
            ids += self._tokens(message.get("content") or "")
            for tc in message.get("tool_calls") or ():
                ids += self._tokens(render_tool_call(tc["function"]["name"], tc["function"]["arguments"]))
            ids.append(END)
        ids += (START, ROLE_IDS["assistant"])
        return ids

    def script(self, messages: list[dict[str, Any]]) -> tuple[list[str], str, str]:
        """This turn's reply: (text words, tool call id, tool call arguments), a function of the conversation."""
        rng = random.Random(len(messages) * 7919 + len(messages[-1].get("content") or ""))
        words = rng.choices(REPLY_VOCAB, k=self.reply_words)
        arguments = json.dumps({"command": f"cat src/file_{rng.randrange(1000)}.py"})
        return words, f"call_{rng.getrandbits(48):012x}", arguments

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions" or scope["method"] != "POST":
            await _send_body(send, 404, b'{"error":{"message":"not found"}}', b"application/json")
            return
        raw = bytearray()
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(raw)
        prompt = self.render_prompt(body["messages"])
        words, call_id, arguments = self.script(body["messages"])
        tool_ids = self._tokens(render_tool_call("bash", arguments))
        completion = [word_id(w) for w in words] + tool_ids + [END]
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(completion)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        tool_call = {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}
        if body.get("stream"):
            await self._stream(send, body, prompt, words, completion, tool_call, usage)
            return
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": " ".join(words), "tool_calls": [tool_call]},
            "finish_reason": "tool_calls",
            "stop_reason": None,
        }
        if body.get("logprobs"):
            pieces = _pieces(words) + ["<tool_call>"] * len(tool_ids) + ["<|im_end|>"]
            choice["logprobs"] = {
                "content": [_logprob_entry(p, i, t) for i, (p, t) in enumerate(zip(pieces, completion, strict=True))]
            }
        out: dict[str, Any] = {
            "id": f"chatcmpl-{call_id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [choice],
            "usage": usage,
        }
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = prompt
            choice["token_ids"] = completion
        await _send_body(send, 200, _DUMPS(out).encode(), b"application/json")

    async def _stream(self, send, body, prompt, words, completion, tool_call, usage) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        ids = bool(body.get("return_token_ids"))
        want_logprobs = bool(body.get("logprobs"))
        head = f'{{"id":"chatcmpl-{tool_call["id"]}","object":"chat.completion.chunk","created":{int(time.time())},'
        head += f'"model":{json.dumps(body["model"])},'
        first: dict[str, Any] = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        pieces = _pieces(words)
        last = len(completion) - 1
        for pos, token_id in enumerate(completion):
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            if pos < len(pieces):
                delta: dict[str, Any] = {"content": pieces[pos]}
            elif pos == len(pieces):
                delta = {"tool_calls": [{"index": 0, **tool_call}]}
            else:
                delta = {}  # tool-call markup held back by the parser, then the end token
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "finish_reason": "tool_calls" if pos == last else None,
            }
            if want_logprobs:
                piece = pieces[pos] if pos < len(pieces) else "<tool_call>"
                choice["logprobs"] = {"content": [_logprob_entry(piece, pos, token_id)]}
            if ids:
                choice["token_ids"] = [token_id]
            event = b""
            if pos == 0:  # vLLM sends the role chunk, carrying the prompt ids, with the first output
                extra = f'"prompt_token_ids":{_DUMPS(prompt)},' if ids else ""
                event = f'data: {head}{extra}"choices":[{_DUMPS(first)}]}}\n\n'.encode()
            event += f'data: {head}"choices":[{_DUMPS(choice)}]}}\n\n'.encode()
            await send({"type": "http.response.body", "body": event, "more_body": True})
        tail = b""
        if (body.get("stream_options") or {}).get("include_usage"):
            tail = f'data: {head}"choices":[],"usage":{_DUMPS(usage)}}}\n\n'.encode()
        await send({"type": "http.response.body", "body": tail + b"data: [DONE]\n\n", "more_body": False})


def _pieces(words: list[str]) -> list[str]:
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def _logprob_entry(piece: str, position: int, token_id: int) -> dict[str, Any]:
    return {
        "token": piece,
        "logprob": -((token_id * 31 + position * 7) % 97) / 100.0,
        "bytes": list(piece.encode()),
        "top_logprobs": [],
    }


async def _send_body(send: Any, status: int, payload: bytes, content_type: bytes) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness_rl.testkit.fake_vllm.fast")
    parser.add_argument("--port", type=int, default=0, help="port to bind on 127.0.0.1 (0 = a free one)")
    parser.add_argument("--token-delay-ms", type=float, default=0.0, help="pause before each streamed token")
    parser.add_argument("--reply-words", type=int, default=24)
    args = parser.parse_args(argv)
    app = FastFakeEngine(reply_words=args.reply_words, token_delay_s=args.token_delay_ms / 1000.0)
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.ensure_future(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            port = server.servers[0].sockets[0].getsockname()[1]
            print(f"http://127.0.0.1:{port}", flush=True)
        await task

    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
