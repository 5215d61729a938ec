"""How long the rollout graph takes to link a long session's calls (the proxy does this once per call)."""

from __future__ import annotations

import random
import time
from typing import Any

from benchmarks.proxy.load import SessionShape
from harness_rl.proxy.graph import RolloutGraph

REPLY_TOKENS = 32  # 24 text tokens, the tool call's tokens and the end token, as the bench engine replies


def time_graph_linking(calls: int, shape: SessionShape, seed: int = 0) -> dict[str, Any]:
    """Adds `calls` agent turns to one graph, each prompt = previous prompt + completion + tool result.

    Returns:
        total_s, mean_ms and max_ms of RolloutGraph.add, final_prompt_tokens, and linked (how many calls
        got the previous call as parent; all but the first should).
    """
    rng = random.Random(seed)
    graph = RolloutGraph()
    prompt = [rng.randrange(1_000, 151_000) for _ in range(shape.system_words + shape.task_words + 8)]
    durations = []
    linked = 0
    for i in range(calls):
        completion = [rng.randrange(1_000, 151_000) for _ in range(REPLY_TOKENS)]
        logprobs = [-rng.random() for _ in completion]
        t0 = time.perf_counter()
        node = graph.add(
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            completion_logprobs=logprobs,
            finish_reason="tool_calls",
            dialect="openai_chat",
            model="bench-model",
            t_start=0.0,
            t_end=0.0,
        )
        durations.append(time.perf_counter() - t0)
        linked += node.parent == i - 1 if i else 0
        prompt = prompt + completion + [rng.randrange(1_000, 151_000) for _ in range(shape.tool_words + 4)]
    return {
        "total_s": sum(durations),
        "mean_ms": sum(durations) / calls * 1000.0,
        "max_ms": max(durations) * 1000.0,
        "final_prompt_tokens": len(prompt),
        "linked": linked + 1,  # the first call is a root by definition
    }
