"""The sampling policy: training calls sample from the model's own distribution, evaluation calls as asked."""

import copy

from harness_rl.proxy.sampling import apply_sampling_policy
from harness_rl.proxy.sessions import SamplingPolicy

TOOL = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}, "strict": True}}


def body(**extra):
    return {"messages": [{"role": "user", "content": "hi"}], "tools": [copy.deepcopy(TOOL)], **extra}


def test_training_drops_constrained_decoding_and_records_it():
    sent = body(
        tool_choice={"type": "function", "function": {"name": "bash"}},
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        structured_outputs={"regex": "a+"},
        top_k=5,
    )
    dropped = apply_sampling_policy(sent, "train", SamplingPolicy())
    assert dropped == ["response_format", "strict", "structured_outputs", "tool_choice", "top_k"]
    assert sent["tool_choice"] == "auto" and "strict" not in sent["tools"][0]["function"]
    assert not {"response_format", "structured_outputs", "top_k"} & set(sent) and sent["top_p"] == 1.0
    assert TOOL["function"]["strict"] is True  # the client's objects are not mutated


def test_training_keeps_unconstrained_choices_silently():
    for choice in ("auto", "none"):
        sent = body(tool_choice=choice, response_format={"type": "text"})
        sent["tools"][0]["function"]["strict"] = False
        assert apply_sampling_policy(sent, "train", SamplingPolicy()) == []
        assert sent["tool_choice"] == choice and sent["tools"][0]["function"]["strict"] is False
    sent = body(tool_choice="required")
    assert apply_sampling_policy(sent, "train", SamplingPolicy()) == ["strict", "tool_choice"]


def test_evaluation_keeps_the_harness_parameters_and_caps_output():
    sent = body(tool_choice="required", top_k=5, top_p=0.9, max_completion_tokens=4096)
    policy = SamplingPolicy(temperature=0.0, max_tokens=256)
    assert apply_sampling_policy(sent, "eval", policy) == []
    assert sent["tool_choice"] == "required" and sent["tools"][0]["function"]["strict"] is True
    assert sent["top_k"] == 5 and sent["top_p"] == 0.9 and sent["temperature"] == 0.0
    assert sent["max_tokens"] == 256 and "max_completion_tokens" not in sent
    sent = body(max_tokens=64)
    apply_sampling_policy(sent, "eval", policy)
    assert sent["max_tokens"] == 64  # a harness asking for less keeps its smaller limit
