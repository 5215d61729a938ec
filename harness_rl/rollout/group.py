"""A scored GRPO group: the rollouts of one task, their rewards and advantages, and the training samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from harness_rl.rollout.session import RolloutResult


@dataclass
class ScoredGroup:
    """All rollouts of one task drawn for one harness at one policy version.

    Attributes:
        group_id: Unique id within the run (samples of a group share their prompt when packed).
        task_id: The task the group ran.
        harness: The harness every rollout of the group ran in (a group never mixes harnesses).
        policy_version: Adapter version the group's sessions were pinned to.
        rollouts: One result per rollout, in launch order.
        advantages: One GRPO advantage per rollout; None for unscorable rollouts.
        samples: Training samples (one per root-to-leaf path of each scorable rollout's graph).
    """

    group_id: int
    task_id: str
    harness: str
    policy_version: int
    rollouts: list[RolloutResult]
    advantages: list[float | None]
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rewards(self) -> list[float | None]:
        return [r.reward for r in self.rollouts]

    @property
    def informative(self) -> bool:
        """Whether any advantage is non-zero: a group of equal rewards has no gradient."""
        return any(a for a in self.advantages if a is not None)


def build_samples(group: ScoredGroup) -> list[dict[str, Any]]:
    """Turn each scorable rollout's training sequences into trainer samples carrying its advantage.

    The proxy's sequences are the ground truth (engine token ids); nothing here re-tokenizes.
    """
    samples: list[dict[str, Any]] = []
    for index, (rollout, advantage) in enumerate(zip(group.rollouts, group.advantages, strict=True)):
        if advantage is None or rollout.trace is None:
            continue
        for sequence in rollout.trace["sequences"]:
            input_ids = torch.tensor(sequence["input_ids"], dtype=torch.long)
            mask = torch.tensor(sequence["loss_mask"], dtype=torch.long)
            if input_ids.numel() < 2 or int(mask[1:].sum()) == 0:
                continue
            samples.append(
                {
                    "input_ids": input_ids,
                    "completion_mask": mask,
                    "old_log_probs": torch.tensor(sequence["logprobs"], dtype=torch.float32),
                    "advantage": float(advantage),
                    "group_id": group.group_id,
                    "policy_version": group.policy_version,
                    "rollout_index": index,
                }
            )
    return samples
