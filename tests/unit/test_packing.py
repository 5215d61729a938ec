"""Row planning respects the token budget, keeps groups together, and keeps every trained token of every sample."""

from __future__ import annotations

import pytest
import torch

from harness_rl.train.packing import (
    RowPlanner,
    pack_stats,
    pad_samples,
    plan_padded_batches,
    plan_rows,
    validate_sample,
)


def sample(prompt: torch.Tensor, continuation_len: int, group: str, seed: int, advantage: float = 1.0) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.cat([prompt, torch.randint(0, 1000, (continuation_len,), generator=g)])
    mask = torch.zeros(len(ids), dtype=torch.long)
    mask[len(prompt) :] = 1
    return {
        "input_ids": ids,
        "completion_mask": mask,
        "old_log_probs": -torch.rand(len(ids), generator=g) * mask,
        "advantage": advantage,
        "group_id": group,
    }


def groups_of(n_groups: int = 3, per_group: int = 4, prompt_len: int = 30) -> list[dict]:
    out = []
    for gi in range(n_groups):
        prompt = torch.randint(0, 1000, (prompt_len,), generator=torch.Generator().manual_seed(100 + gi))
        out += [sample(prompt, 10 + 7 * i, f"g{gi}", seed=10 * gi + i) for i in range(per_group)]
    # Interleave groups, as they come off an async queue.
    return [out[i * per_group + j] for j in range(per_group) for i in range(n_groups)]


def test_budget_respected_and_groups_kept_together() -> None:
    samples = groups_of()
    rows = plan_rows(samples, token_budget=140)
    for row in rows:
        assert len(row.tokens) <= 140 and row.trained <= 140
        packed = row.pack()
        assert packed["input_ids"].numel() == len(row.tokens) <= 140
    # Each group's prompt (30) + continuations (10+17+24+31 = 82) = 112 unique tokens fits one row.
    homes = {s["group_id"]: {i for i, row in enumerate(rows) if s["group_id"] in row.groups} for s in samples}
    assert all(len(h) == 1 for h in homes.values()), homes
    stats = pack_stats(rows)
    assert stats["samples"] == len(samples) and stats["packing_ratio"] > 1.5


def test_over_budget_sample_names_the_budget() -> None:
    prompt = torch.arange(50)
    with pytest.raises(ValueError, match="token_budget=40"):
        plan_rows([sample(prompt, 10, "g", 0)], token_budget=40)


def test_every_trained_token_appears_once_per_sample() -> None:
    samples = groups_of()
    for row in plan_rows(samples, token_budget=200):
        packed = row.pack()
        for i, s in enumerate(row.samples):
            terms = packed["segment_id"] == i
            trained = torch.nonzero(s["completion_mask"][1:]).squeeze(-1) + 1
            assert int(terms.sum()) == len(trained)
            # The packed position of each term predicts exactly that sample's token there.
            assert torch.equal(packed["shift_labels"][packed["token_index"][terms]], s["input_ids"][trained])
            assert torch.equal(packed["old_log_probs"][terms], s["old_log_probs"][trained].float())
            assert torch.all(packed["advantages"][terms] == s["advantage"])


def test_row_planner_one_sample_at_a_time_equals_plan_rows() -> None:
    samples = groups_of(n_groups=4)
    grouped = sorted(samples, key=lambda s: s["group_id"])  # plan_rows takes samples group by group
    planner = RowPlanner(140)
    for s in grouped:
        planner.place(s)
    expected = plan_rows(samples, 140)
    assert [[id(s) for s in row.samples] for row in planner.rows] == [[id(s) for s in row.samples] for row in expected]
    with pytest.raises(ValueError, match="token_budget"):
        RowPlanner(0)


def test_padded_batches_obey_the_budget_in_cells() -> None:
    samples = groups_of(n_groups=3)  # lengths 40, 47, 54, 61 per group
    batches = plan_padded_batches(samples, token_budget=130)
    for batch in batches:
        assert len(batch) * max(len(s["input_ids"]) for s in batch) <= 130
    assert sorted(id(s) for b in batches for s in b) == sorted(id(s) for s in samples)
    # Longest first: the three 61-token samples cannot share (3 x 61 > 130), two do.
    assert [len(b) for b in batches][:2] == [2, 2]
    with pytest.raises(ValueError, match="token_budget=50"):
        plan_padded_batches(samples, token_budget=50)


def test_malformed_and_unscorable_samples_are_rejected() -> None:
    good = sample(torch.arange(5), 3, "g", 0)
    with pytest.raises(ValueError, match="advantage"):
        validate_sample({**good, "advantage": None})
    with pytest.raises(ValueError, match="completion_mask"):
        validate_sample({**good, "completion_mask": good["completion_mask"][:-1]})
    with pytest.raises(ValueError, match="missing"):
        validate_sample({"input_ids": good["input_ids"]})


def test_pad_samples_right_pads_in_pack_order() -> None:
    samples = groups_of(n_groups=1, per_group=3)
    padded = pad_samples(samples, pad_token_id=7)
    assert padded["input_ids"].shape == (3, max(len(s["input_ids"]) for s in samples))
    for b, s in enumerate(samples):
        n = len(s["input_ids"])
        assert torch.equal(padded["input_ids"][b, :n], s["input_ids"])
        assert padded["attention_mask"][b].sum() == n and torch.all(padded["input_ids"][b, n:] == 7)
        terms = padded["batch_index"] == b
        assert torch.equal(padded["targets"][terms], s["input_ids"][padded["token_index"][terms] + 1])
