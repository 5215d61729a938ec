"""The sampling policy applied to every upstream request, whatever the harness asked for.

For training, the recorded log-probs must be those of the distribution the trainer optimizes, so nucleus
truncation is disabled (top_p = 1.0) and every parameter that reshapes the logits is dropped; the names
dropped are recorded on the call's node so a harness that relies on them is visible in the trace.

Constrained decoding counts as reshaping: a forced tool call (`tool_choice` "required" or a named function),
a strict tool schema or a `response_format` makes vLLM mask the logits before it computes log-probs, so a
forced token is recorded at log-prob ~0 where the unconstrained model gives it -3.7 or -15 (measured with the
embedded model), and the trainer's importance ratios against such values would be meaningless. Training
sessions therefore sample such calls unconstrained (tool_choice "auto", strict off).
"""

from __future__ import annotations

from typing import Any

from harness_rl.proxy.sessions import Purpose, SamplingPolicy

# vLLM chat-completions parameters that change the sampling distribution beyond temperature.
LOGIT_ALTERING_PARAMS = (
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "bad_words",
    "allowed_token_ids",
    "min_tokens",
    "logits_processors",
    "use_beam_search",
)
# vLLM parameters that constrain decoding to a grammar or schema (dropped outright for training).
STRUCTURED_OUTPUT_PARAMS = ("response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
                            "guided_grammar", "structural_tag")  # fmt: skip


def apply_sampling_policy(body: dict[str, Any], purpose: Purpose, policy: SamplingPolicy) -> list[str]:
    """Rewrites an upstream chat-completions body in place for the session's policy.

    Args:
        body: the normalized upstream request (mutated).
        purpose: "train" forces top_p = 1.0 and drops logit-altering parameters; "eval" keeps them.
        policy: session overrides; temperature and top_p replace the client's values, max_tokens caps
            the client's request (a harness asking for fewer tokens keeps its smaller limit).

    Returns:
        The names of client parameters that were dropped, sorted.
    """
    dropped = []
    if purpose == "train":
        dropped += _unconstrain(body)
        for name in LOGIT_ALTERING_PARAMS:
            if name in body:
                # Explicit neutral values (e.g. top_k=-1, presence_penalty=0) are dropped too, but not
                # reported: they change nothing.
                if not is_neutral(name, body[name]):
                    dropped.append(name)
                del body[name]
    if policy.temperature is not None:
        body["temperature"] = policy.temperature
    if purpose == "train":
        body["top_p"] = 1.0
    elif policy.top_p is not None:
        body["top_p"] = policy.top_p
    client_max = body.pop("max_completion_tokens", None)
    if client_max is None:
        client_max = body.get("max_tokens")
    if policy.max_tokens is not None:
        client_max = policy.max_tokens if client_max is None else min(int(client_max), policy.max_tokens)
    body.pop("max_tokens", None)
    if client_max is not None:
        body["max_tokens"] = client_max
    return sorted(dropped)


def _unconstrain(body: dict[str, Any]) -> list[str]:
    """Removes constrained decoding from a training request; returns what it changed."""
    changed = []
    tool_choice = body.get("tool_choice")
    if tool_choice == "required" or isinstance(tool_choice, dict):
        body["tool_choice"] = "auto"
        changed.append("tool_choice")
    tools = body.get("tools")
    if isinstance(tools, list) and any(_is_strict(tool) for tool in tools):
        body["tools"] = [_without_strict(tool) for tool in tools]
        changed.append("strict")
    for name in STRUCTURED_OUTPUT_PARAMS:
        if name in body:
            value = body.pop(name)
            if value is not None and not (name == "response_format" and _is_text_format(value)):
                changed.append(name)
    return changed


def _is_strict(tool: Any) -> bool:
    return isinstance(tool, dict) and isinstance(tool.get("function"), dict) and tool["function"].get("strict") is True


def _without_strict(tool: Any) -> Any:
    if not _is_strict(tool):
        return tool
    return {**tool, "function": {k: v for k, v in tool["function"].items() if k != "strict"}}


def _is_text_format(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "text"


def is_neutral(name: str, value: Any) -> bool:
    """Whether sending ``name`` with ``value`` changes nothing (None, top_k=-1, a zero penalty, an empty list)."""
    if value is None:
        return True
    if name == "top_k":
        return value in (-1, 0)
    if name in ("presence_penalty", "frequency_penalty", "min_p", "min_tokens"):
        return value == 0
    if name == "repetition_penalty":
        return value == 1
    if name in ("logit_bias", "bad_words", "allowed_token_ids", "logits_processors"):
        return not value
    if name == "use_beam_search":
        return value is False
    return False
