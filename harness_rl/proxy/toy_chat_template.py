"""The toy tokenizer and chat template of the scripted fake engine, as production code reads them back.

One token per character (its code point) and a ChatML-like template: ``START role text END`` per message, then
``START assistant`` for the reply, with an assistant's tool calls rendered as Hermes-style ``<tool_call>`` tags.
It is prefix-consistent the way a real chat template is: a conversation's next prompt starts with the previous
prompt plus the previous completion.

The scripted fake engine (``harness_rl.testkit.fake_vllm``) tokenizes with it, so every trace recorded against
that engine (the bundled rollout corpus under ``harness_rl/envs/data/trajectories``) holds these ids; the
synthetic task source decodes such traces with the same constants (``synthetic_trajectory.decode_fake_engine``).
It lives here rather than in the testkit because production code reads it and never imports the testkit.
"""

from __future__ import annotations

import json
from typing import Any

START, END = 100_000, 100_001  # turn delimiters, like <|im_start|> / <|im_end|>
ROLE_IDS = {"system": 100_010, "user": 100_011, "assistant": 100_012, "tool": 100_013}


def render_assistant(text: str, tool_calls: list[tuple[str, dict[str, Any]]]) -> str:
    """The text a model emits for a reply (Hermes-style tool-call tags)."""
    calls = "".join(
        "<tool_call>" + json.dumps({"name": n, "arguments": a}, sort_keys=True) + "</tool_call>" for n, a in tool_calls
    )
    return text + calls


def tokenize_text(text: str) -> list[int]:
    return [ord(c) for c in text]


def render_prompt(messages: list[dict[str, Any]]) -> list[int]:
    """Toy chat template: START role content END per message, then START assistant."""
    ids: list[int] = []
    for message in messages:
        ids += [START, ROLE_IDS.get(message["role"], 100_019)]
        if message["role"] == "assistant":
            calls = [
                (tc["function"]["name"], json.loads(tc["function"]["arguments"] or "{}"))
                for tc in message.get("tool_calls") or []
            ]
            ids += tokenize_text(render_assistant(_text(message.get("content")), calls))
        else:
            ids += tokenize_text(_text(message.get("content")))
        ids.append(END)
    return ids + [START, ROLE_IDS["assistant"]]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""
