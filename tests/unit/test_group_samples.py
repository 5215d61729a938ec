"""Each token the policy sampled carries loss in exactly one training sample, however the rollout graph branches.

Every root-to-leaf path of a rollout graph is a training sequence, so a retry, a compaction or a side call after
a call repeats that call's completion in several sequences. The samples keep the repeated tokens as context but
train them once; two independent calls that happen to sample identical tokens still both train.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from harness_rl.envs.smoke import smoke_task
from harness_rl.proxy.graph import RolloutGraph
from harness_rl.rollout.group import ScoredGroup, build_samples, loss_once_masks, score_group
from harness_rl.rollout.session import RolloutResult
from harness_rl.train.packing import plan_rows


def _call(graph: RolloutGraph, prompt: list[int], completion: list[int]) -> list[int]:
    """Record one engine call; log-probs encode (node id, position) so misalignment cannot go unnoticed."""
    node_id = len(graph)
    logprobs = [-(node_id + 1) - i / 100 for i in range(len(completion))]
    graph.add(
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        completion_logprobs=logprobs,
        finish_reason="stop",
        dialect="openai_chat",
        model="m",
        t_start=0.0,
        t_end=0.0,
    )
    return prompt + completion


def branching_trace() -> dict:
    """A session whose graph branches after shared calls, as the proxy's admin API returns it (JSON round trip).

    0: system+task -> first reply            (shared by the retry branch and the main branch)
    1: main branch, turn 2                   (parent 0, continued by 3)
    2: retry of turn 2                       (parent 0, sibling of 1)
    3: main branch, turn 3                   (parent 1)
    4: compaction: a new root
    5: an independent call identical to 4    (same prompt, same sampled tokens: a separate node)
    6: continues 5                           (parent 5, the newest identical node)
    7: a side call with the system prompt only (a root that shares a prefix with 0 but is no child of it)
    """
    graph = RolloutGraph()
    system = list(range(100, 112))
    first = _call(graph, system + [1, 2, 3], [11, 12, 13, 14])
    main = _call(graph, first + [5, 6], [21, 22, 23])
    _call(graph, first + [5, 6], [31, 32])
    _call(graph, main + [7], [41, 42, 43, 44, 45])
    compacted = _call(graph, system + [9, 9], [51, 52, 53])
    _call(graph, system + [9, 9], [51, 52, 53])
    _call(graph, compacted + [8], [61, 62])
    _call(graph, system + [4], [71])
    trace = {"nodes": [n.to_json() for n in graph.nodes], "sequences": graph.sequences()}
    return json.loads(json.dumps(trace))


def _sampled_tokens(trace: dict) -> int:
    return sum(len(n["completion_token_ids"]) for n in trace["nodes"])


def _rollout(trace: dict, score: float) -> RolloutResult:
    return RolloutResult("t", "pi-v0", None, trace, score, None, 1, Path("/nonexistent"), 0.0)


def _group(traces_and_advantages: list[tuple[dict, float]]) -> ScoredGroup:
    rollouts = [_rollout(trace, 1.0) for trace, _ in traces_and_advantages]
    return ScoredGroup(0, "t", "pi", 0, rollouts, [a for _, a in traces_and_advantages])


def test_the_fixture_branches():
    trace = branching_trace()
    parents = {n["id"]: n["parent"] for n in trace["nodes"]}
    assert parents == {0: None, 1: 0, 2: 0, 3: 1, 4: None, 5: None, 6: 5, 7: None}
    assert [s["node_ids"] for s in trace["sequences"]] == [[0, 2], [0, 1, 3], [4], [5, 6], [7]]
    # The proxy's own masks train node 0 twice: this is what the samples must not do.
    assert sum(sum(s["loss_mask"]) for s in trace["sequences"]) == _sampled_tokens(trace) + 4


def test_one_loss_term_per_sampled_token():
    trace = branching_trace()
    samples = build_samples(_group([(trace, 0.5)]))
    assert len(samples) == len(trace["sequences"])
    assert sum(int(s["completion_mask"].sum()) for s in samples) == _sampled_tokens(trace)
    # Each node's span is trained in exactly one sample (the first sequence through it), as context elsewhere.
    by_nodes = {tuple(seq["node_ids"]): s for seq, s in zip(trace["sequences"], samples, strict=True)}
    for node in trace["nodes"]:
        start = len(node["prompt_token_ids"])
        end = start + len(node["completion_token_ids"])
        spans = [s["completion_mask"][start:end].tolist() for ids, s in by_nodes.items() if node["id"] in ids]
        assert sorted(spans) == [[0] * (end - start)] * (len(spans) - 1) + [[1] * (end - start)]
    assert by_nodes[(0, 2)]["completion_mask"][15:19].tolist() == [1, 1, 1, 1]  # first through node 0 keeps it
    assert by_nodes[(0, 1, 3)]["completion_mask"][15:19].tolist() == [0, 0, 0, 0]


def test_context_and_logprobs_stay_aligned():
    trace = branching_trace()
    samples = build_samples(_group([(trace, -1.0)]))
    nodes = {n["id"]: n for n in trace["nodes"]}
    for sequence, sample in zip(trace["sequences"], samples, strict=True):
        assert sample["input_ids"].tolist() == sequence["input_ids"]  # every token kept as context
        assert sample["old_log_probs"].tolist() == pytest.approx(sequence["logprobs"])
        for node_id in sequence["node_ids"]:
            node = nodes[node_id]
            start = len(node["prompt_token_ids"])
            span = slice(start, start + len(node["completion_token_ids"]))
            assert sample["input_ids"][span].tolist() == node["completion_token_ids"]
            assert sample["old_log_probs"][span].tolist() == pytest.approx(node["completion_logprobs"])
        # Trained positions are sampled positions: the mask never adds loss where the proxy had none.
        assert not (sample["completion_mask"].bool() & ~torch.tensor(sequence["loss_mask"]).bool()).any()


def test_identical_independent_samples_both_train():
    trace = branching_trace()
    masks = loss_once_masks(trace)
    # Nodes 4 and 5 sampled the same tokens from the same prompt; each is its own call and trains once.
    assert masks[2][14:17] == [1, 1, 1] and masks[3][14:17] == [1, 1, 1]


def test_rollouts_of_a_group_do_not_share_claims():
    """Two rollouts with equal graphs are two samplings: each trains all of its own tokens."""
    trace = branching_trace()
    samples = build_samples(_group([(trace, 1.0), (branching_trace(), -1.0), (trace, None)]))
    assert sum(int(s["completion_mask"].sum()) for s in samples) == 2 * _sampled_tokens(trace)
    assert {s["rollout_index"] for s in samples} == {0, 1}


def test_tree_packing_counts_each_sampled_token_once():
    """Through TreeRow: the shared prefix is forwarded once, and its loss terms appear once, not per branch."""
    trace = branching_trace()
    samples = build_samples(_group([(trace, 1.0)]))
    rows = plan_rows(samples, token_budget=4096)
    assert len(rows) == 1
    packed = rows[0].pack()
    assert len(packed["token_index"]) == _sampled_tokens(trace)
    # A forwarded position holds two loss terms only where two independent calls sampled the same tokens from
    # the same prompt (nodes 4 and 5, three tokens); node 0, shared by two branches, has one term per token.
    assert sorted(Counter(packed["token_index"].tolist()).values()) == [1] * 17 + [2] * 3
    expected = sorted(lp for n in trace["nodes"] for lp in n["completion_logprobs"])
    assert sorted(packed["old_log_probs"].tolist()) == pytest.approx(expected)


def test_score_group_builds_loss_once_samples():
    task = smoke_task("t", "out.txt", "x")
    rollouts = [_rollout(branching_trace(), 1.0), _rollout(branching_trace(), 0.0)]
    group = score_group(3, task, "pi", 0, rollouts, efficiency_bonus=0.0)
    assert sum(int(s["completion_mask"].sum()) for s in group.samples) == 2 * _sampled_tokens(branching_trace())


def test_a_trace_whose_nodes_disagree_is_refused():
    trace = branching_trace()
    trace["nodes"] = trace["nodes"][:3]
    with pytest.raises(ValueError, match="names node 3"):
        loss_once_masks(trace)
