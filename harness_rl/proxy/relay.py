"""One client model call, end to end: auth, budget, policy, engine call, capture, reply in the dialect.

Everything here is dialect-independent; a Dialect only decodes the request and encodes replies, errors
and stream events.

The model's context is part of the attempt, not a fault: a call whose output budget outgrows the context is
retried once with what is left of it, and a call whose prompt alone fills the context is answered by the proxy
with a plain assistant reply that ends the run (see proxy/context.py), recorded as a ``context_exhausted`` event
on the session rather than as a failure, so the rollout is still scored as the attempt it was.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from harness_rl.proxy import fast_json
from harness_rl.proxy.capture import CallCapture, CaptureError
from harness_rl.proxy.context import ContextRefusal, context_message, parse_context_refusal
from harness_rl.proxy.dialects.base import DecodedRequest, Dialect
from harness_rl.proxy.errors import ProxyError
from harness_rl.proxy.gatekeeper import Block, StreamHold, TextBlock
from harness_rl.proxy.own_replies import SSE_HEADERS, proxy_reply
from harness_rl.proxy.request_fields import strip_unlisted
from harness_rl.proxy.sampling import apply_sampling_policy, is_neutral
from harness_rl.proxy.sessions import Session, SessionStore
from harness_rl.proxy.upstream import CHAT_PATH, Upstream, UpstreamError, UpstreamStream

log = logging.getLogger(__name__)

BUDGET_MESSAGE = "Request budget exhausted; stop now."


class Relay:
    """Serves client model calls for every dialect against one engine."""

    def __init__(
        self,
        sessions: SessionStore,
        upstream: Upstream,
        *,
        base_model: str,
        max_body_bytes: int,
        budget_message: str = BUDGET_MESSAGE,
        max_model_len: int | None = None,
    ) -> None:
        self.sessions = sessions
        self.upstream = upstream
        self.base_model = base_model
        self.max_body_bytes = max_body_bytes
        self.budget_message = budget_message
        #: The engine's context length: given at start, or learned from the engine's first refusal that names it.
        self.max_model_len = max_model_len

    async def handle(self, request: Request, dialect: Dialect) -> Response:
        try:
            session = self.sessions.get(dialect.api_key(request))
            if session is None:
                raise ProxyError(401, "invalid_api_key", "Unknown or missing session key.")
            req = dialect.decode_request(await self._read_json(request), dict(request.path_params))
        except ProxyError as error:
            return _error_response(dialect, error)
        model = session.adapter or self.base_model
        if not session.begin_request():
            return self._budget_reply(session, dialect, req, model)
        if session.gate is not None:
            # Calls the gate defused go back to the engine as sampled, with the explanation as their result.
            session.gate.restore(req.upstream_body.get("messages"))
        body, dropped = self._upstream_body(session, dialect, req, model)
        if req.stream:
            return await self._stream(session, dialect, req, body, model, dropped)
        return await self._complete(session, dialect, req, body, model, dropped)

    async def _read_json(self, request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise ProxyError(413, "payload_too_large", f"Request body over {self.max_body_bytes} bytes.")
        raw = bytearray()
        async for part in request.stream():
            raw += part
            if len(raw) > self.max_body_bytes:
                raise ProxyError(413, "payload_too_large", f"Request body over {self.max_body_bytes} bytes.")
        try:
            return fast_json.loads(raw)
        except (ValueError, RecursionError) as exc:
            # ValueError covers UnicodeDecodeError; RecursionError: nesting deeper than the parser's recursion
            # limit (e.g. "[" * 100_000).
            raise ProxyError(400, "invalid_request", f"Malformed JSON body: {exc}", param="body") from exc

    def _upstream_body(
        self, session: Session, dialect: Dialect, req: DecodedRequest, model: str
    ) -> tuple[dict, list[str]]:
        body = dict(req.upstream_body)
        reported: list[str] = []
        if session.purpose == "train":
            # Only the fields the dialect's public API has reach the engine (no vLLM extras from the policy). All
            # are counted on the session; the call's node lists those that would have changed something (an
            # explicit neutral value such as min_p=0 is not news, as in the sampling policy).
            original = dict(body)
            stripped = strip_unlisted(body, dialect.upstream_fields)
            session.note_stripped(stripped)
            reported = [name for name in stripped if not is_neutral(name, original[name])]
        body["model"] = model
        dropped = sorted({*apply_sampling_policy(body, session.purpose, session.sampling), *reported})
        if self.max_model_len is not None and body.get("max_tokens") is not None:
            # No output budget can exceed the whole context; vLLM refuses one that does without looking further.
            body["max_tokens"] = min(int(body["max_tokens"]), self.max_model_len)
        body["return_token_ids"] = True
        body["logprobs"] = True
        if not req.options.get("logprobs"):
            body.pop("top_logprobs", None)
        # include_reasoning=false makes vLLM withhold token ids and log-probs; the encoder hides reasoning.
        body.pop("include_reasoning", None)
        # echo would prepend the last message to the output text, which is not sampled text.
        body.pop("echo", None)
        if req.stream:
            body["stream"] = True
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        else:
            body["stream"] = False
            body.pop("stream_options", None)  # vLLM rejects stream_options without stream=true
        return body, dropped

    async def _complete(
        self,
        session: Session,
        dialect: Dialect,
        req: DecodedRequest,
        body: dict,
        model: str,
        dropped: list[str],
    ) -> Response:
        t_start = time.time()
        try:
            sent = await self._post(session, body)
        except UpstreamError as exc:
            return _upstream_unreachable(session, dialect, exc)
        if isinstance(sent, ContextRefusal):
            return self._context_reply(session, dialect, req, model, sent)
        status, content = sent
        if status != 200:
            return _upstream_refused(session, dialect, status, content)
        try:
            data = fast_json.loads(content)
        except ValueError:
            session.record_failure("upstream_error", "engine sent a non-JSON reply", status=status)
            return _error_response(dialect, ProxyError(502, "upstream_error", "Engine sent a non-JSON reply."))
        capture = CallCapture.from_response(data)
        blocks = _review_reply(session, data, body.get("tools"))
        t_end = time.time()

        async def record() -> None:
            self._record(session, dialect, capture, model, t_start, dropped, blocks, t_end=t_end)

        # Recorded right after the reply is written, so the client does not wait for the graph. Nothing else runs
        # on the event loop in between (writing the last part of a response and recording do not yield to it), so
        # no later call of the session, and no trace request, can see the session without this call.
        return JSONResponse(dialect.encode_response(data, req), background=BackgroundTask(record))

    async def _stream(
        self,
        session: Session,
        dialect: Dialect,
        req: DecodedRequest,
        body: dict,
        model: str,
        dropped: list[str],
    ) -> Response:
        t_start = time.time()
        try:
            resp = await self._open_stream(session, body)
        except UpstreamError as exc:
            return _upstream_unreachable(session, dialect, exc)
        if isinstance(resp, ContextRefusal):
            return self._context_reply(session, dialect, req, model, resp)
        if isinstance(resp, tuple):
            # Refusals come before any event, so the client still gets a proper HTTP error status.
            return _upstream_refused(session, dialect, *resp)
        encoder = dialect.stream_encoder(req)

        async def events() -> AsyncIterator[bytes]:
            capture = CallCapture()
            hold = StreamHold(session.gate, body.get("tools")) if session.gate is not None else None
            error: str | None = None
            done = False
            try:
                async for batch in _sse_data_batches(resp):
                    # Everything one read brought goes out as one write: under load a read holds several
                    # chunks, and one send per chunk would cost more than the relaying itself.
                    out: list[bytes] = []
                    failure: Exception | None = None
                    for data in batch:
                        if data == b"[DONE]":
                            done = True
                            break
                        try:
                            chunk = fast_json.loads(data)
                            if chunk.get("error") and not chunk.get("choices"):
                                error = f"engine error mid-stream: {_error_message(chunk)}"
                                break
                            capture.feed_chunk(chunk)
                            if hold is None:
                                out += encoder.on_chunk(chunk)
                            else:
                                for released in hold.on_chunk(chunk, capture.tool_calls):
                                    out += encoder.on_chunk(released)
                        except Exception as exc:  # the events before it still reach the client first
                            failure = exc
                            break
                    if out:
                        yield b"".join(out)
                    if failure is not None:
                        raise failure
                    if done or error is not None:
                        break
            except UpstreamError as exc:
                error = f"engine stream failed: {exc}"
            except ValueError as exc:
                error = f"engine stream failed: {exc!r}"
            except (GeneratorExit, asyncio.CancelledError):
                # The client went away (the server cancels this generator): the call is lost to training.
                session.record_failure(
                    "client_disconnected", "client closed the stream before the reply ended", t_start=t_start
                )
                raise
            except Exception as exc:  # a proxy bug must still end the client's stream cleanly
                log.exception("session %s: stream relay failed", session.key)
                error = f"proxy error while relaying: {exc!r}"
            finally:
                with anyio.CancelScope(shield=True):
                    await resp.aclose()
            if error is None and not done:
                error = "engine stream ended without [DONE]"
            if error is not None:
                n_tokens = len(capture.completion_token_ids or [])
                session.record_failure("upstream_stream_error", error, t_start=t_start, completion_tokens=n_tokens)
                for event in encoder.on_error(error):
                    yield event
                return
            self._record(session, dialect, capture, model, t_start, dropped, hold.blocks if hold else [])
            for event in encoder.on_end():
                yield event

        return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)

    def _record(
        self,
        session: Session,
        dialect: Dialect,
        capture: CallCapture,
        model: str,
        t_start: float,
        dropped: list[str],
        blocks: Sequence[Block | TextBlock] = (),
        t_end: float | None = None,
    ) -> None:
        try:
            capture.validate()
        except CaptureError as exc:
            # The harness still gets its reply; the session is marked so the rollout can be discarded.
            session.record_failure(exc.kind, str(exc), t_start=t_start, finish_reason=capture.finish_reason)
            log.warning("session %s: call not captured: %s", session.key, exc)
            return
        try:
            self._add_node(session, dialect, capture, model, t_start, dropped, blocks, t_end)
        except ValueError as exc:  # token ids that are not int32 integers; no tokenizer has 2**31 tokens
            session.record_failure("bad_token_ids", str(exc), t_start=t_start, finish_reason=capture.finish_reason)
            log.warning("session %s: call not captured: %s", session.key, exc)

    @staticmethod
    def _add_node(
        session: Session,
        dialect: Dialect,
        capture: CallCapture,
        model: str,
        t_start: float,
        dropped: list[str],
        blocks: Sequence[Block | TextBlock],
        t_end: float | None,
    ) -> None:
        session.graph.add(
            prompt_token_ids=capture.prompt_token_ids or [],
            completion_token_ids=capture.completion_token_ids or [],
            completion_logprobs=capture.completion_logprobs,
            finish_reason=capture.finish_reason,
            tool_calls=capture.tool_calls,
            dialect=dialect.name,
            model=model,
            t_start=t_start,
            t_end=time.time() if t_end is None else t_end,
            usage=capture.usage,
            dropped_params=dropped,
            blocked=[block.to_json() for block in blocks],
        )

    def _budget_reply(self, session: Session, dialect: Dialect, req: DecodedRequest, model: str) -> Response:
        now = time.time()
        session.graph.add(
            prompt_token_ids=[],
            completion_token_ids=[],
            completion_logprobs=[],
            finish_reason="stop",
            dialect=dialect.name,
            model=model,
            t_start=now,
            t_end=now,
            budget_exhausted=True,
        )
        return proxy_reply(dialect, req, model, self.budget_message, "stop")

    async def _post(self, session: Session, body: dict) -> tuple[int, bytes] | ContextRefusal:
        """A non-streamed engine call fitted to the context: (status, body), or the refusal of a prompt that fills
        it. Raises UpstreamError like ``Upstream.post_json``."""
        with session.engine_call():
            status, content = await self.upstream.post_json(CHAT_PATH, body)
        refusal = self._context_refusal(session, body, status, content, may_retry=True)
        if refusal is not None and not refusal.exhausted:
            with session.engine_call():
                status, content = await self.upstream.post_json(CHAT_PATH, body)
            refusal = self._context_refusal(session, body, status, content, may_retry=False)
        return refusal if refusal is not None else (status, content)

    async def _open_stream(self, session: Session, body: dict) -> UpstreamStream | tuple[int, bytes] | ContextRefusal:
        """``_post`` for a streamed call: the open stream, (status, body) of a refusal, or a full context."""
        with session.engine_call():
            resp = await self.upstream.open_stream(CHAT_PATH, body)
        if resp.status_code == 200:
            return resp
        content = await _read_refusal(resp)
        refusal = self._context_refusal(session, body, resp.status_code, content, may_retry=True)
        if refusal is not None and not refusal.exhausted:
            with session.engine_call():
                resp = await self.upstream.open_stream(CHAT_PATH, body)
            if resp.status_code == 200:
                return resp
            content = await _read_refusal(resp)
            refusal = self._context_refusal(session, body, resp.status_code, content, may_retry=False)
        return refusal if refusal is not None else (resp.status_code, content)

    def _context_refusal(
        self, session: Session, body: dict, status: int, content: bytes, *, may_retry: bool
    ) -> ContextRefusal | None:
        """Reads an engine refusal about the context length (None: any other reply, or a budget refusal past the
        one retry). For an output budget that outgrew the context, sets the budget that fits in ``body`` and
        records the clamp on the session; the caller sends the call once more.

        Two refusals can come in a row: vLLM 0.32 checks ``max_tokens <= max_model_len`` before it measures the
        prompt, so a prompt over the context can be refused only after the capped retry.
        """
        if status != 400:
            return None
        refusal = parse_context_refusal(_refusal_message(content), body.get("max_tokens"))
        if refusal is None:
            return None
        if refusal.max_model_len is not None:
            self.max_model_len = refusal.max_model_len
        if not refusal.exhausted and not may_retry:
            return None
        if not refusal.exhausted:
            session.record_event(
                "max_tokens_clamped",
                requested=body.get("max_tokens"),
                max_tokens=refusal.retry_max_tokens,
                prompt_tokens=refusal.prompt_tokens,
                max_model_len=refusal.max_model_len,
            )
            body["max_tokens"] = refusal.retry_max_tokens
        return refusal

    def _context_reply(
        self, session: Session, dialect: Dialect, req: DecodedRequest, model: str, refusal: ContextRefusal
    ) -> Response:
        """Answers a call whose prompt alone fills the model's context, in the caller's dialect.

        A plain assistant text with finish_reason "length" (the model had no room left to answer), which ends a
        harness's run like the request-budget reply does; a harness that compacts its history and asks again is
        sent to the engine again. Recorded as an event: the rollout is a real attempt that ran out of context.
        """
        max_model_len = refusal.max_model_len or self.max_model_len
        session.record_event(
            "context_exhausted", prompt_tokens=refusal.prompt_tokens, max_model_len=max_model_len, dialect=dialect.name
        )
        return proxy_reply(dialect, req, model, context_message(max_model_len), "length")


async def _sse_data_batches(resp: UpstreamStream) -> AsyncIterator[list[bytes]]:
    """The `data:` payloads of a server-sent event stream, one list per network read.

    Splits bytes itself rather than using a line iterator that decodes every read to text first; the JSON
    parser takes the bytes as they are.
    """
    pending = b""
    async for part in resp.aiter_bytes():
        lines = (pending + part).splitlines(keepends=True)
        pending = lines.pop() if lines and not lines[-1].endswith((b"\n", b"\r")) else b""
        batch = [line[5:].strip() for line in lines if line.startswith(b"data:")]
        if batch:
            yield batch
    if pending.startswith(b"data:"):
        yield [pending[5:].strip()]


def _review_reply(session: Session, data: dict[str, Any], request_tools: Any) -> list[Block | TextBlock]:
    """Runs the session's safety gate over a non-streamed reply, defusing blocked calls in place."""
    choices = data.get("choices") if isinstance(data.get("choices"), list) else []
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    if session.gate is None or not isinstance(message, dict):
        return []
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        message["tool_calls"] = calls = list(calls)
        return list(session.gate.review_tool_calls(calls, request_tools))
    content = message.get("content")
    if isinstance(content, str):
        message["content"], block = session.gate.review_text(content)
        return [block] if block else []
    return []


async def _read_refusal(resp: UpstreamStream) -> bytes:
    """The body of a refused stream request (an error object, not events); releases the connection."""
    try:
        return await resp.aread()
    finally:
        await resp.aclose()


def _refusal_message(content: bytes) -> str:
    try:
        return _error_message(json.loads(content))
    except ValueError:
        return content.decode(errors="replace")[:2000]


def _error_response(dialect: Dialect, error: ProxyError) -> Response:
    return JSONResponse(dialect.error_body(error), status_code=error.status)


def _error_message(payload: Any) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        return str(payload["error"].get("message") or payload["error"])
    if isinstance(payload, dict) and "message" in payload:
        return str(payload["message"])
    return str(payload)[:2000]


def _upstream_unreachable(session: Session, dialect: Dialect, exc: UpstreamError) -> Response:
    message = f"Engine unreachable: {exc}"
    session.record_failure("upstream_unreachable", message, status=None)
    return _error_response(dialect, ProxyError(502, "upstream_error", message))


def _upstream_refused(session: Session, dialect: Dialect, status: int, content: bytes) -> Response:
    message = _refusal_message(content)
    session.record_failure("upstream_error", message, status=status)
    # The engine's 4xx (e.g. prompt longer than the context) is the client's problem; its 5xx is ours.
    client_status = status if 400 <= status < 500 else 502
    return _error_response(dialect, ProxyError(client_status, "upstream_error", f"Engine error {status}: {message}"))
