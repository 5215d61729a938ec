"""The packing benchmark's fixture: real GRPO groups captured through the vLLM CPU engine and the capture proxy.

The file is gzip JSON written by :mod:`benchmarks.record_packing_groups`: ``meta`` (model, harness, versions,
date) and ``samples``, one per training sequence the proxy captured, each with ``group_id``,
``rollout_index``, ``advantage``, ``input_ids``, ``loss_mask`` (1 where the engine sampled the token) and
``logprobs`` (the engine's log-prob of each sampled token, 0 elsewhere). :func:`load_samples` turns them into
the trainer's sample dicts (:mod:`harness_rl.train.packing`).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import torch

DATA = Path(__file__).parent / "data"
#: Every rollout's workspace at one path, as in a container sandbox: a group's system prompts are identical.
DEFAULT_FIXTURE = DATA / "pi_groups.json.gz"
#: A folder per rollout, as ``LocalSandbox`` runs them today: pi's system prompt names the working directory,
#: so the prompts of a group part after ~630 of their ~1,530 tokens and each rollout adds ~1,000 unique tokens.
ROLLOUT_CWD_FIXTURE = DATA / "pi_groups_rollout_cwd.json.gz"

_KEYS = ("group_id", "rollout_index", "advantage", "input_ids", "loss_mask", "logprobs")


def read_fixture(path: Path = DEFAULT_FIXTURE) -> dict[str, Any]:
    """The raw payload (``meta``, ``samples``), checked for the keys and aligned lengths.

    Raises:
        FileNotFoundError: The fixture is missing (record it: ``python -m benchmarks.record_packing_groups``).
        ValueError: A sample lacks a key or its per-token lists disagree in length.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; record it with: python -m benchmarks.record_packing_groups")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        payload = json.load(fh)
    for i, sample in enumerate(payload["samples"]):
        missing = [key for key in _KEYS if key not in sample]
        if missing:
            raise ValueError(f"{path}: sample {i} is missing {missing}")
        n = len(sample["input_ids"])
        if not n == len(sample["loss_mask"]) == len(sample["logprobs"]):
            raise ValueError(f"{path}: sample {i} has input_ids/loss_mask/logprobs of different lengths")
    return payload


def load_samples(path: Path = DEFAULT_FIXTURE, groups: int | None = None) -> list[dict[str, Any]]:
    """The fixture's samples as trainer samples (tensors), of the first ``groups`` groups (all when None).

    ``advantage`` is the recorded one; ``policy_version`` is 0 (the base model sampled everything).
    """
    payload = read_fixture(path)
    kept = sorted({s["group_id"] for s in payload["samples"]})[:groups]
    return [
        {
            "input_ids": torch.tensor(s["input_ids"], dtype=torch.long),
            "completion_mask": torch.tensor(s["loss_mask"], dtype=torch.long),
            "old_log_probs": torch.tensor(s["logprobs"], dtype=torch.float32),
            "advantage": float(s["advantage"]),
            "group_id": s["group_id"],
            "rollout_index": s["rollout_index"],
            "policy_version": 0,
        }
        for s in payload["samples"]
        if s["group_id"] in kept
    ]
