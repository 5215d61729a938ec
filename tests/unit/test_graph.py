"""A session's calls link to the call whose prompt+completion is the longest token prefix of their prompt,
and every root-to-leaf path becomes one sequence with loss mask and log-probs on sampled tokens only."""

import time

import pytest

from harness_rl.proxy.graph import RolloutGraph


def add(graph, prompt, completion, *, budget=False):
    return graph.add(
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        completion_logprobs=[-0.1 * (i + 1) for i in range(len(completion))],
        finish_reason="stop",
        dialect="openai_chat",
        model="m",
        t_start=0.0,
        t_end=1.0,
        budget_exhausted=budget,
    )


def test_chain_links_to_previous_turn():
    g = RolloutGraph()
    a = add(g, [1, 2, 3], [4, 5])
    b = add(g, [1, 2, 3, 4, 5, 6, 7], [8])
    c = add(g, [1, 2, 3, 4, 5, 6, 7, 8, 9], [10, 11])
    assert (a.parent, b.parent, c.parent) == (None, a.id, b.id)


def test_longest_prefix_wins_over_shorter_ancestor():
    g = RolloutGraph()
    a = add(g, [1], [2])
    b = add(g, [1, 2, 3], [4])
    c = add(g, [1, 2, 3, 4, 5], [6])
    assert c.parent == b.id and b.parent == a.id


def test_retries_are_siblings_and_unrelated_prompts_new_roots():
    g = RolloutGraph()
    a = add(g, [1, 2], [3])
    retry1 = add(g, [1, 2, 3, 9], [5])
    retry2 = add(g, [1, 2, 3, 9], [6, 7])
    compacted = add(g, [1, 50, 51], [52])  # context compaction: shares only the system prompt
    sub_agent = add(g, [70, 71], [72])
    assert retry1.parent == retry2.parent == a.id
    assert compacted.parent is None and sub_agent.parent is None


def test_prompt_equal_to_parent_full_sequence_links():
    g = RolloutGraph()
    a = add(g, [1, 2], [3])
    b = add(g, [1, 2, 3], [4])
    assert b.parent == a.id


def test_completion_is_not_prefix_when_tokens_differ():
    g = RolloutGraph()
    add(g, [1, 2], [3, 4])
    b = add(g, [1, 2, 3, 5], [6])  # re-tokenized reply differs from sampled tokens
    assert b.parent is None


def test_sequences_mask_and_logprobs_alignment():
    g = RolloutGraph()
    add(g, [1, 2, 3], [4, 5])
    add(g, [1, 2, 3, 4, 5, 6, 7], [8, 9])
    add(g, [1, 2, 3, 4, 5, 6, 7], [8, 10, 11])  # retry: second leaf
    seqs = g.sequences()
    assert [s["node_ids"] for s in seqs] == [[0, 1], [0, 2]]
    s = seqs[0]
    assert s["input_ids"] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert s["loss_mask"] == [0, 0, 0, 1, 1, 0, 0, 1, 1]
    assert s["logprobs"] == pytest.approx([0, 0, 0, -0.1, -0.2, 0, 0, -0.1, -0.2])
    s = seqs[1]
    assert s["loss_mask"] == [0, 0, 0, 1, 1, 0, 0, 1, 1, 1]
    assert len(s["logprobs"]) == len(s["input_ids"]) == len(s["loss_mask"])
    assert all((lp != 0) == bool(m) for lp, m in zip(s["logprobs"], s["loss_mask"], strict=True))


def test_budget_nodes_are_not_linked_indexed_or_in_sequences():
    g = RolloutGraph()
    add(g, [1, 2], [3])
    budget = add(g, [], [], budget=True)
    after = add(g, [1, 2, 3, 4], [5])
    assert budget.parent is None and budget.budget_exhausted
    assert after.parent == 0
    assert [s["node_ids"] for s in g.sequences()] == [[0, 2]]


def test_misaligned_logprobs_are_rejected():
    with pytest.raises(ValueError, match="log-probs"):
        RolloutGraph().add(
            prompt_token_ids=[1],
            completion_token_ids=[2, 3],
            completion_logprobs=[-1.0],
            finish_reason="stop",
            dialect="openai_chat",
            model="m",
            t_start=0,
            t_end=0,
        )


def test_500_call_session_links_quickly():
    # A long agent run: every call extends the conversation by ~60 tokens, with a retry every 10 calls.
    g = RolloutGraph()
    prompt = list(range(1000))
    start = time.perf_counter()
    for i in range(500):
        completion = [10_000 + i * 100 + k for k in range(40)]
        node = add(g, prompt, completion)
        if i % 10 == 5:
            add(g, prompt, [7] * 40)  # sibling retry
        prompt = prompt + completion + [20_000 + i] * 20
    elapsed = time.perf_counter() - start
    assert node.parent is not None
    chain = g.sequences()
    assert max(len(s["node_ids"]) for s in chain) == 500
    # About 0.4 s here; comparing each new prompt with every earlier call would take far longer.
    assert elapsed < 3.0, f"linking 550 calls took {elapsed:.2f}s"


def test_token_ids_outside_int32_are_rejected():
    for bad in ([2**31], [-(2**31) - 1], ["7"], [1.5]):
        with pytest.raises(ValueError, match="int32"):
            add(RolloutGraph(), bad, [1])


def test_nodes_keep_typed_arrays_and_serialize_to_lists():
    g = RolloutGraph()
    node = add(g, [1, 2, 2**31 - 1], [4, 5])
    assert node.prompt_token_ids.itemsize == 4 and node.completion_logprobs.itemsize == 8
    out = node.to_json()
    assert out["prompt_token_ids"] == [1, 2, 2**31 - 1] and out["completion_token_ids"] == [4, 5]
    assert out["completion_logprobs"] == pytest.approx([-0.1, -0.2])
    assert all(type(v) is list for v in (out["prompt_token_ids"], out["completion_logprobs"]))
