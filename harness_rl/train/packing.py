"""Planning rollout samples into token-budgeted prefix-tree rows and micro-batches, and the padded alternative.

A row is TRL's ``TreeRow``: a prefix trie of samples whose ``pack()`` gives one padding-free row in which every
shared prefix (the group's prompt, a conversation before a retry) is forwarded once; see
:mod:`harness_rl.train.tree_attention` for how it is attended. The budget bounds a row's *unique* tokens (and
its trained tokens), so it bounds the memory of one forward. Models that cannot be tree-packed train on
right-padded batches whose cells (batch size x longest sample) obey the same budget.

A sample is a dict with ``input_ids`` (LongTensor[T]), ``completion_mask`` (0/1 [T], 1 where the token was
sampled by the policy), ``old_log_probs`` (FloatTensor[T], the sampler's log-prob of each token, 0 elsewhere),
``advantage`` (float) and ``group_id`` (hashable; samples of one GRPO group share their prompt).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch

with warnings.catch_warnings():
    # The module is stable enough for us; the package-level "experimental" warning is noise in every run.
    warnings.simplefilter("ignore")
    from trl.experimental.async_grpo.packing import TreeRow

__all__ = [
    "TreeRow",
    "pack_stats",
    "RowPlanner",
    "pad_samples",
    "plan_padded_batches",
    "plan_rows",
    "validate_sample",
]

_SAMPLE_KEYS = ("input_ids", "completion_mask", "old_log_probs", "advantage", "group_id")


def validate_sample(sample: dict[str, Any]) -> None:
    """Raise ValueError unless ``sample`` has the keys, aligned lengths and a finite advantage."""
    missing = [key for key in _SAMPLE_KEYS if key not in sample]
    if missing:
        raise ValueError(f"sample is missing {missing}")
    n = len(sample["input_ids"])
    if n == 0:
        raise ValueError("sample has no tokens")
    for key in ("completion_mask", "old_log_probs"):
        if len(sample[key]) != n:
            raise ValueError(f"sample {key} has {len(sample[key])} entries for {n} input_ids")
    advantage = sample["advantage"]
    if advantage is None or not math.isfinite(float(advantage)):
        raise ValueError(f"sample advantage must be a finite float, got {advantage!r} (drop unscorable rollouts)")


class RowPlanner:
    """Places samples one at a time into tree rows of at most ``token_budget`` unique (and trained) tokens.

    Each sample goes to the least-loaded row already holding its group that still fits (the prompt is there, so
    it costs only its continuation), else to the least-loaded row that fits, else to a new row. Incremental, so a
    step assembler can ask how many rows the groups taken so far need without re-planning them for every offer.
    """

    def __init__(self, token_budget: int):
        if token_budget < 1:
            raise ValueError(f"token_budget must be >= 1, got {token_budget}")
        self.token_budget = token_budget
        self.rows: list[TreeRow] = []

    def place(self, sample: dict[str, Any]) -> TreeRow:
        """Add ``sample`` to a row and return that row.

        Raises:
            ValueError: The sample is longer than ``token_budget`` on its own, or is malformed.
        """
        validate_sample(sample)
        if len(sample["input_ids"]) > self.token_budget:
            raise ValueError(
                f"sample of {len(sample['input_ids'])} tokens exceeds token_budget={self.token_budget}; raise the "
                "budget to at least the engine's max_model_len"
            )
        fitting = [row for row in self.rows if row.fits(sample, self.token_budget)]
        home = [row for row in fitting if sample["group_id"] in row.groups]
        candidates = home or fitting
        if candidates:
            row = min(candidates, key=lambda r: r.load)
        else:
            row = TreeRow()
            self.rows.append(row)
        row.add(sample)
        return row


def plan_rows(samples: Sequence[dict[str, Any]], token_budget: int) -> list[TreeRow]:
    """Greedily place samples into rows of at most ``token_budget`` unique (and trained) tokens (:class:`RowPlanner`).

    Samples are taken group by group (groups in order of first appearance, samples in order within a group),
    so an interleaved queue still packs each group's rollouts next to their shared prompt.

    Raises:
        ValueError: A sample is longer than ``token_budget`` on its own, or is malformed.
    """
    by_group: dict[Any, list[dict[str, Any]]] = {}
    for sample in samples:
        validate_sample(sample)
        by_group.setdefault(sample["group_id"], []).append(sample)
    planner = RowPlanner(token_budget)
    for sample in (s for group in by_group.values() for s in group):
        planner.place(sample)
    return planner.rows


def plan_padded_batches(samples: Sequence[dict[str, Any]], token_budget: int) -> list[list[dict[str, Any]]]:
    """Split samples into right-padded batches of at most ``token_budget`` cells (batch size x longest sample).

    Longest first, each batch filled while ``(size + 1) x width`` fits its width (its first, longest sample):
    sorting makes samples of similar length share a batch, so little of the budget is spent on padding.

    Raises:
        ValueError: A sample is longer than ``token_budget`` on its own, or is malformed.
    """
    batches: list[list[dict[str, Any]]] = []
    width = 0
    for sample in sorted(samples, key=lambda s: len(s["input_ids"]), reverse=True):
        validate_sample(sample)
        n = len(sample["input_ids"])
        if n > token_budget:
            raise ValueError(f"sample of {n} tokens exceeds token_budget={token_budget}")
        if batches and (len(batches[-1]) + 1) * width <= token_budget:
            batches[-1].append(sample)
        else:
            batches.append([sample])
            width = n
    return batches


def pack_stats(rows: Sequence[TreeRow]) -> dict[str, float]:
    """Token accounting of planned rows: raw tokens, unique (forwarded) tokens, trained tokens, packing ratio."""
    raw = sum(len(sample["input_ids"]) for row in rows for sample in row.samples)
    unique = sum(len(row.tokens) for row in rows)
    trained = sum(row.trained for row in rows)
    return {
        "samples": sum(len(row.samples) for row in rows),
        "rows": len(rows),
        "raw_tokens": raw,
        "unique_tokens": unique,
        "trained_tokens": trained,
        "packing_ratio": raw / unique if unique else 1.0,
    }


def pad_samples(samples: Sequence[dict[str, Any]], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Right-pad samples into a batch, with loss terms in ``TreeRow.pack()``'s order.

    The path for models that cannot be tree-packed (see :mod:`harness_rl.train.tree_attention`).

    Returns:
        ``input_ids`` and ``attention_mask`` ``[B, T]``; per loss term (``M``): ``batch_index``,
        ``token_index`` (column whose logits predict the target), ``targets``, ``old_log_probs``,
        ``advantages``, ``segment_id`` (= batch index).
    """
    for sample in samples:
        validate_sample(sample)
    width = max(len(sample["input_ids"]) for sample in samples)
    input_ids = torch.full((len(samples), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(samples), width), dtype=torch.long)
    terms: dict[str, list] = {key: [] for key in ("batch_index", "token_index", "targets", "old_log_probs")}
    advantages = []
    for b, sample in enumerate(samples):
        ids = sample["input_ids"].long()
        input_ids[b, : len(ids)] = ids
        attention_mask[b, : len(ids)] = 1
        trained = torch.nonzero(torch.as_tensor(sample["completion_mask"])[1:].bool()).squeeze(-1) + 1
        terms["batch_index"].append(torch.full_like(trained, b))
        terms["token_index"].append(trained - 1)
        terms["targets"].append(ids[trained])
        terms["old_log_probs"].append(torch.as_tensor(sample["old_log_probs"], dtype=torch.float32)[trained])
        advantages.append(torch.full((len(trained),), float(sample["advantage"])))
    out = {key: torch.cat(values) for key, values in terms.items()}
    out["advantages"] = torch.cat(advantages)
    out["segment_id"] = out["batch_index"].clone()
    return {"input_ids": input_ids, "attention_mask": attention_mask, **out}
