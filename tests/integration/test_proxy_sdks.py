"""The real openai (chat and responses), anthropic and google-genai SDKs talk to the real vLLM CPU engine through
the capture proxy: every reply parses in its SDK (text, tool calls with parsed arguments), streams arrive in
pieces, and each session's training sequences are exactly the engine's own token ids and log-probs as read
from the raw bytes between proxy and engine."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types

from harness_rl.proxy.server import ProxyServer
from harness_rl.testkit.httpx_upstream import HttpxUpstream
from tests.proxy_helpers import EngineReply, RecordingTransport, new_session, trace

ADMIN = "admin-secret"
BASE = "smollm2-135m"
SYSTEM = "You are a helpful assistant."
TEXT_QUESTION = "Write one short sentence about cats."
FOLLOW_UP = "Now write one about dogs."
TOOL_QUESTION = "What is the weather in Paris?"
TOOL_RESULT = "Sunny, 21 degrees Celsius."
TOOL_NAME = "get_weather"
TOOL_DESCRIPTION = "Current weather of a city"
CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]}},
    "required": ["city"],
}
# CPU samples ~40 tokens/s. A forced, strict call is ~25 tokens: the Hermes <tool_call> envelope around
# arguments pinned to CITY_SCHEMA (only JSON whitespace is left to the model).
TEXT_TOKENS = 12
TOOL_TOKENS = 64
# The session makes every call greedy, as a training session sets its temperature (the anthropic SDK has no
# temperature parameter at all): what the model writes is then fixed, so no assertion depends on luck.
TEMPERATURE = 0.0


@dataclass
class SDKCall:
    """A tool call as the SDK parsed it."""

    id: str | None
    name: str
    args: dict[str, Any]


@dataclass
class SDKReply:
    """One model reply as the SDK parsed it, plus the assistant turn to send back in the dialect's shape."""

    text: str
    calls: list[SDKCall]
    stop: Any  # the SDK's finish / stop reason
    turn: Any
    text_events: int = 0  # SDK stream events that carried text


# ---------------------------------------------------------------------------------------------------------
# One adapter per SDK: the same conversation in each dialect's own request and history shapes.
# `tools` is None (no tools), "force" (the dialect's way to demand a call) or "none" (tools shown, no call).


class ChatSDK:
    name = "openai_chat"
    # A named choice; with strict=true vLLM also pins the arguments to the schema.
    upstream_force = {"type": "function", "function": {"name": TOOL_NAME}}
    tool_stop = "stop"  # as OpenAI does for a named choice; vLLM says "tool_calls" only for auto/required
    same_tools_both_turns = True
    tool = {
        "type": "function",
        "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": CITY_SCHEMA, "strict": True},
    }

    def __init__(self, url: str, key: str) -> None:
        http = httpx.Client(trust_env=False)
        self.client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, http_client=http)

    def start(self, question: str) -> list:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]

    def ask(self, history: list, *, stream: bool, max_tokens: int, tools: str | None = None) -> SDKReply:
        kwargs: dict[str, Any] = dict(model="gpt-x", messages=history, max_tokens=max_tokens)
        if tools:
            kwargs.update(tools=[self.tool], tool_choice=self.upstream_force if tools == "force" else "none")
        if not stream:
            choice = self.client.chat.completions.create(**kwargs).choices[0]
            message = choice.message
            text, finish, text_events = message.content or "", choice.finish_reason, 0
            tool_calls = [tc.model_dump(include={"id", "type", "function"}) for tc in message.tool_calls or []]
        else:
            # Merged by hand as harnesses do: the SDK's stream helper refuses to finish a reply cut by max_tokens.
            text, finish, text_events, merged = "", None, 0, {}
            for chunk in self.client.chat.completions.create(**kwargs, stream=True):
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    text_events += bool(choice.delta.content)
                    finish = choice.finish_reason or finish
                    for tc in choice.delta.tool_calls or []:
                        slot = merged.setdefault(
                            tc.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                        )
                        slot["id"] += tc.id or ""
                        slot["function"]["name"] += (tc.function and tc.function.name) or ""
                        slot["function"]["arguments"] += (tc.function and tc.function.arguments) or ""
            tool_calls = [merged[i] for i in sorted(merged)]
        calls = [
            SDKCall(tc["id"], tc["function"]["name"], json.loads(tc["function"]["arguments"])) for tc in tool_calls
        ]
        turn = {"role": "assistant", "content": text or None, **({"tool_calls": tool_calls} if tool_calls else {})}
        return SDKReply(text, calls, finish, turn, text_events)

    def add_reply(self, history: list, reply: SDKReply) -> list:
        return [*history, reply.turn]

    def add_tool_result(self, history: list, call: SDKCall, result: str) -> list:
        return [*history, {"role": "tool", "tool_call_id": call.id, "content": result}]

    def add_user(self, history: list, text: str) -> list:
        return [*history, {"role": "user", "content": text}]


class ResponsesSDK:
    name = "openai_responses"
    upstream_force = "required"
    tool_stop = "completed"
    same_tools_both_turns = True
    tool = {"type": "function", "name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": CITY_SCHEMA,
            "strict": True}  # fmt: skip

    def __init__(self, url: str, key: str) -> None:
        http = httpx.Client(trust_env=False)
        self.client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, http_client=http)

    def start(self, question: str) -> list:
        return [{"role": "user", "content": [{"type": "input_text", "text": question}]}]

    def ask(self, history: list, *, stream: bool, max_tokens: int, tools: str | None = None) -> SDKReply:
        kwargs: dict[str, Any] = dict(model="gpt-x", instructions=SYSTEM, input=history, max_output_tokens=max_tokens)
        if tools:
            kwargs.update(tools=[self.tool], tool_choice="required" if tools == "force" else "none")
        if not stream:
            response = self.client.responses.create(**kwargs)
            text_events = 0
        else:
            with self.client.responses.stream(**kwargs) as events:
                text_events = sum(event.type == "response.output_text.delta" for event in events)
                response = events.get_final_response()
        calls = [
            SDKCall(item.call_id, item.name, json.loads(item.arguments))
            for item in response.output
            if item.type == "function_call"
        ]
        turn = [item.model_dump(exclude_none=True) for item in response.output]
        return SDKReply(response.output_text, calls, response.status, turn, text_events)

    def add_reply(self, history: list, reply: SDKReply) -> list:
        return [*history, *reply.turn]

    def add_tool_result(self, history: list, call: SDKCall, result: str) -> list:
        return [*history, {"type": "function_call_output", "call_id": call.id, "output": result}]

    def add_user(self, history: list, text: str) -> list:
        return [*history, {"role": "user", "content": [{"type": "input_text", "text": text}]}]


class AnthropicSDK:
    name = "anthropic_messages"
    upstream_force = "required"  # tool_choice {"type": "any"}
    tool_stop = "tool_use"  # what tells claude-code to run the tool and call again
    same_tools_both_turns = True
    tool = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": CITY_SCHEMA, "strict": True}

    def __init__(self, url: str, key: str) -> None:
        http = anthropic.DefaultHttpxClient(trust_env=False)
        self.client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, http_client=http)

    def start(self, question: str) -> list:
        return [{"role": "user", "content": question}]

    def ask(self, history: list, *, stream: bool, max_tokens: int, tools: str | None = None) -> SDKReply:
        kwargs: dict[str, Any] = dict(model="claude-x", system=SYSTEM, messages=history, max_tokens=max_tokens)
        if tools:
            kwargs.update(tools=[self.tool], tool_choice={"type": "any" if tools == "force" else "none"})
        if not stream:
            message = self.client.messages.create(**kwargs)
            text_events = 0
        else:
            with self.client.messages.stream(**kwargs) as events:
                text_events = sum(
                    event.type == "content_block_delta" and event.delta.type == "text_delta" for event in events
                )
                message = events.get_final_message()
        text = "".join(block.text for block in message.content if block.type == "text")
        calls = [SDKCall(block.id, block.name, block.input) for block in message.content if block.type == "tool_use"]
        blocks = [{"type": "text", "text": text}] if text else []
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.args} for c in calls]
        return SDKReply(text, calls, message.stop_reason, {"role": "assistant", "content": blocks}, text_events)

    def add_reply(self, history: list, reply: SDKReply) -> list:
        return [*history, reply.turn]

    def add_tool_result(self, history: list, call: SDKCall, result: str) -> list:
        return [
            *history,
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result}]},
        ]

    def add_user(self, history: list, text: str) -> list:
        return [*history, {"role": "user", "content": text}]


class GoogleSDK:
    name = "google_generate"
    upstream_force = "required"  # functionCallingConfig mode ANY
    tool_stop = types.FinishReason.STOP
    # Mode ANY promises calls that follow the declared schema, so the codec marks the tools strict in that turn
    # only; the chat template renders that flag into the tool list in the system turn.
    same_tools_both_turns = False
    tool = types.Tool(
        function_declarations=[
            # Google's own Schema form; the codec lowers it to JSON schema.
            types.FunctionDeclaration(
                name=TOOL_NAME, description=TOOL_DESCRIPTION, parameters=types.Schema.model_validate(CITY_SCHEMA)
            )
        ]
    )

    def __init__(self, url: str, key: str) -> None:
        # Kept on the instance: the SDK closes its HTTP client when the Client object is collected.
        options = types.HttpOptions(base_url=url, api_version="v1beta")
        self.client = genai.Client(api_key=key, http_options=options)

    def start(self, question: str) -> list:
        return [types.Content(role="user", parts=[types.Part(text=question)])]

    def ask(self, history: list, *, stream: bool, max_tokens: int, tools: str | None = None) -> SDKReply:
        config = types.GenerateContentConfig(system_instruction=SYSTEM, max_output_tokens=max_tokens)
        if tools:
            mode = types.FunctionCallingConfigMode.ANY if tools == "force" else types.FunctionCallingConfigMode.NONE
            config.tools = [self.tool]
            config.tool_config = types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode=mode))
        kwargs = dict(model="gemini-x", contents=history, config=config)
        if not stream:
            candidate = self.client.models.generate_content(**kwargs).candidates[0]
            parts, finish, text_events = candidate.content.parts, candidate.finish_reason, 0
        else:
            parts, finish, text_events = [], None, 0
            for chunk in self.client.models.generate_content_stream(**kwargs):
                candidate = chunk.candidates[0]
                new = (candidate.content and candidate.content.parts) or []
                text_events += any(part.text for part in new)
                parts += new
                finish = candidate.finish_reason or finish
        text = "".join(part.text or "" for part in parts)
        calls = [
            SDKCall(part.function_call.id, part.function_call.name, part.function_call.args)
            for part in parts
            if part.function_call
        ]
        return SDKReply(text, calls, finish, types.Content(role="model", parts=parts), text_events)

    def add_reply(self, history: list, reply: SDKReply) -> list:
        return [*history, reply.turn]

    def add_tool_result(self, history: list, call: SDKCall, result: str) -> list:
        response = types.FunctionResponse(id=call.id, name=call.name, response={"output": result})
        return [*history, types.Content(role="user", parts=[types.Part(function_response=response)])]

    def add_user(self, history: list, text: str) -> list:
        return [*history, types.Content(role="user", parts=[types.Part(text=text)])]


SDKS = [ChatSDK, ResponsesSDK, AnthropicSDK, GoogleSDK]


# ---------------------------------------------------------------------------------------------------------
# Fixtures and the independent check of the trace.


@pytest.fixture(scope="module")
def proxy_stack(engine):
    """One proxy in front of the session's engine, recording every engine exchange."""
    recorder = RecordingTransport()
    upstream = HttpxUpstream(engine.url, transport=recorder)
    with ProxyServer(engine.url, ADMIN, base_model=BASE, upstream=upstream) as proxy:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        with httpx.Client(base_url=proxy.url, headers=headers, trust_env=False) as admin:
            yield proxy, admin, recorder


@dataclass
class Stack:
    url: str
    admin: httpx.Client
    recorder: RecordingTransport
    key: str

    def engine_replies(self) -> list[EngineReply]:
        return [exchange.reply() for exchange in self.recorder.exchanges]


@pytest.fixture
def stack(proxy_stack) -> Stack:
    """A fresh greedy training session; the recorder holds only this test's engine calls."""
    proxy, admin, recorder = proxy_stack
    recorder.exchanges.clear()
    return Stack(proxy.url, admin, recorder, new_session(admin, sampling={"temperature": TEMPERATURE}))


def expected_sequences(replies: list[EngineReply], paths: list[list[int]]) -> list[dict[str, Any]]:
    """The training sequences the engine's replies imply for the given root-to-leaf paths of call indices.

    The leaf's prompt + completion is the sequence; every call on the path must sit in it at the position of
    its own prompt, and its sampled tokens (and only those) carry loss and their log-probs.
    """
    out = []
    for path in paths:
        leaf = replies[path[-1]]
        input_ids = leaf.prompt_token_ids + leaf.completion_token_ids
        loss_mask, logprobs = [0] * len(input_ids), [0.0] * len(input_ids)
        for reply in (replies[i] for i in path):
            start, end = len(reply.prompt_token_ids), len(reply.prompt_token_ids) + len(reply.completion_token_ids)
            assert input_ids[:end] == reply.prompt_token_ids + reply.completion_token_ids
            loss_mask[start:end] = [1] * (end - start)
            logprobs[start:end] = reply.logprobs
        out.append({"node_ids": path, "input_ids": input_ids, "loss_mask": loss_mask, "logprobs": logprobs})
    return out


def check_engine_replies(replies: list[EngineReply], streams: list[bool]) -> None:
    """Every call went to the engine in the wanted mode, asked for what training needs and got it back."""
    assert [r.request["stream"] for r in replies] == streams
    for reply in replies:
        assert reply.request["model"] == BASE
        assert reply.request["return_token_ids"] is True and reply.request["logprobs"] is True
        assert reply.request["top_p"] == 1.0 and reply.request["temperature"] == TEMPERATURE
        assert reply.prompt_token_ids and reply.completion_token_ids
        assert len(reply.logprobs) == len(reply.completion_token_ids)


# ---------------------------------------------------------------------------------------------------------
# Tests.


@pytest.mark.parametrize("sdk_class", SDKS, ids=[s.name for s in SDKS])
def test_text_turns_stream_and_form_one_sequence(stack, sdk_class):
    sdk = sdk_class(stack.url, stack.key)
    history = sdk.start(TEXT_QUESTION)
    first = sdk.ask(history, stream=False, max_tokens=TEXT_TOKENS)
    history = sdk.add_user(sdk.add_reply(history, first), FOLLOW_UP)
    second = sdk.ask(history, stream=True, max_tokens=TEXT_TOKENS)

    replies = stack.engine_replies()
    check_engine_replies(replies, streams=[False, True])
    for sdk_reply, engine_reply in zip([first, second], replies, strict=True):
        assert sdk_reply.text == engine_reply.content and not sdk_reply.calls
    # It streams: each piece of text the engine sent reached the SDK as its own event.
    assert second.text_events == replies[1].content_chunks > 1

    t = trace(stack.admin, stack.key)
    assert t["failures"] == [] and [n["dialect"] for n in t["nodes"]] == [sdk.name] * 2
    # Plain text re-rendered by the chat template is the same tokens the engine sampled (checked here), so
    # the second call extends the first: one sequence whose loss covers both replies.
    assert [n["parent"] for n in t["nodes"]] == [None, 0]
    assert t["sequences"] == expected_sequences(replies, [[0, 1]])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("sdk_class", SDKS, ids=[s.name for s in SDKS])
def test_tool_call_round_trip(stack, sdk_class, stream):
    # A forced call is constrained decoding, which training sessions refuse (see the next test): evaluation
    # sessions keep the harness's tool_choice, and these are greedy with top_p 1.0 like the training ones.
    stack.key = new_session(stack.admin, purpose="eval", sampling={"temperature": TEMPERATURE, "top_p": 1.0})
    sdk = sdk_class(stack.url, stack.key)
    history = sdk.start(TOOL_QUESTION)
    first = sdk.ask(history, stream=stream, max_tokens=TOOL_TOKENS, tools="force")
    (call,) = first.calls
    history = sdk.add_tool_result(sdk.add_reply(history, first), call, TOOL_RESULT)
    second = sdk.ask(history, stream=stream, max_tokens=TEXT_TOKENS, tools="none")

    replies = stack.engine_replies()
    check_engine_replies(replies, streams=[stream, stream])
    # The dialect's "you must call this schema" reached vLLM, whose structural tag (xgrammar, hermes format)
    # made the model sample a complete call. Without strict only the envelope is constrained and the 135M
    # model can ramble in the free-form arguments until max_tokens, leaving no call at all.
    assert [r.request["tool_choice"] for r in replies] == [sdk.upstream_force, "none"]
    assert [t["function"].get("strict") for t in replies[0].request["tools"]] == [True], "strict not forwarded"
    (engine_call,) = replies[0].tool_calls
    assert call.name == engine_call["name"] == TOOL_NAME
    assert call.args == json.loads(engine_call["arguments"]) and isinstance(call.args, dict)
    assert first.text == replies[0].content and first.stop == sdk.tool_stop
    # The result went back in the dialect's shape and reached the engine paired with the call.
    messages = replies[1].request["messages"]
    (assistant,) = [m for m in messages if m["role"] == "assistant"]
    assert [tc["function"]["name"] for tc in assistant["tool_calls"]] == [TOOL_NAME]
    assert messages[-1] == {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"], "content": TOOL_RESULT}
    assert second.text == replies[1].content and not second.calls
    if stream:
        assert second.text_events == replies[1].content_chunks > 1

    t = trace(stack.admin, stack.key)
    assert t["failures"] == [] and t["nodes"][0]["tool_calls"][0]["function"]["name"] == TOOL_NAME
    # The chat template renders the call back as compact JSON while the model sampled it with newlines and
    # indentation, so the first call's tokens are not a prefix of the second prompt: the second call is a new
    # root and each call is its own sequence. Where the tool list is the same in both turns the two prompts
    # agree up to the first reply; where it is not (see GoogleSDK) they part inside the system turn.
    first_tokens = replies[0].prompt_token_ids + replies[0].completion_token_ids
    second_prompt = replies[1].prompt_token_ids
    pairs = zip(first_tokens, second_prompt, strict=False)
    parted = next((i for i, (a, b) in enumerate(pairs) if a != b), len(first_tokens))
    assert parted < len(first_tokens)
    assert (parted >= len(replies[0].prompt_token_ids)) == sdk.same_tools_both_turns
    assert [n["parent"] for n in t["nodes"]] == [None, None]
    assert t["sequences"] == expected_sequences(replies, [[0], [1]])


@pytest.mark.parametrize("sdk_class", SDKS, ids=[s.name for s in SDKS])
def test_training_sessions_sample_forced_calls_unconstrained(stack, sdk_class):
    """vLLM records log-probs after its grammar mask, so a forced call's tokens would carry log-prob ~0: in a
    training session the proxy asks for the call unconstrained and records what it dropped."""
    sdk = sdk_class(stack.url, stack.key)
    sdk.ask(sdk.start(TOOL_QUESTION), stream=False, max_tokens=8, tools="force")

    (reply,) = stack.engine_replies()
    assert reply.request["tool_choice"] == "auto"
    assert all("strict" not in tool["function"] for tool in reply.request["tools"])
    (node,) = trace(stack.admin, stack.key)["nodes"]
    assert "tool_choice" in node["dropped_params"]
    assert node["completion_token_ids"] == reply.completion_token_ids
