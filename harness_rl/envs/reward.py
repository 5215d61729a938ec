"""Rewards of one GRPO group: correctness plus a small efficiency bonus, minus an optional safety penalty.

    reward_i  = score_i + bonus_i - penalty_i
    bonus_i   = efficiency_bonus * (mean - n_i) / mean   if score_i == 1 and n_i < mean, else 0
    penalty_i = block_penalty * (tool calls of rollout i the safety gate blocked)

where n_i is rollout i's tool calls and mean is the mean tool calls over the group's scorable rollouts. So
a correct rollout with no tool calls at all would get the full 0.1, one at the mean gets 0, and a wrong or
partly right rollout never gets a bonus: the bonus can only break ties among correct rollouts, never make
a wrong answer look better than a right one. Unscorable rollouts (score None) stay None and do not count
towards the mean. ``efficiency_bonus`` is ``tasks.efficiency_bonus`` and ``block_penalty`` is
``safety.block_penalty`` in the config; each component is logged (``reward/correctness``, ``reward/efficiency``,
``reward/block_penalty``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_EFFICIENCY_BONUS = 0.1


@dataclass(frozen=True)
class RewardParts:
    """One rollout's reward by component.

    Attributes:
        correctness: The verifier's score (1/0 for pass/fail verifiers).
        efficiency: The efficiency bonus (>= 0).
        block_penalty: What blocked tool calls cost (>= 0, subtracted).
    """

    correctness: float
    efficiency: float = 0.0
    block_penalty: float = 0.0

    @property
    def total(self) -> float:
        """The reward GRPO sees."""
        return self.correctness + self.efficiency - self.block_penalty

    def as_dict(self) -> dict[str, float]:
        """The components and the total, for logs."""
        return {"correctness": self.correctness, "efficiency": self.efficiency,
                "block_penalty": self.block_penalty, "total": self.total}  # fmt: skip


def group_reward_parts(
    scores: Sequence[float | None],
    tool_calls: Sequence[int],
    blocked: Sequence[int] | None = None,
    *,
    efficiency_bonus: float = MAX_EFFICIENCY_BONUS,
    block_penalty: float = 0.0,
) -> list[RewardParts | None]:
    """Each rollout's reward components (None where unscorable); see the module docstring.

    Args:
        scores: Verifier scores in [0, 1], None for unscorable rollouts.
        tool_calls: Tool calls each rollout made.
        blocked: Tool calls of each rollout the safety gate blocked (none when None).
        efficiency_bonus: Largest efficiency bonus.
        block_penalty: Penalty per blocked call.

    Raises:
        ValueError: Lengths differ, a count is negative or a score is outside [0, 1].
    """
    blocked = [0] * len(scores) if blocked is None else list(blocked)
    if len(blocked) != len(scores) or any(b < 0 for b in blocked):
        raise ValueError(f"blocked counts {blocked} do not match {len(scores)} scores")
    totals = compute_group_rewards(scores, tool_calls, max_bonus=efficiency_bonus)
    return [
        None if s is None else RewardParts(float(s), float(total) - float(s), block_penalty * b)
        for s, total, b in zip(scores, totals, blocked, strict=True)
    ]


def compute_group_rewards(
    scores: Sequence[float | None],
    tool_calls: Sequence[int],
    *,
    max_bonus: float = MAX_EFFICIENCY_BONUS,
) -> list[float | None]:
    """Rewards for one group's rollouts, in order.

    Args:
        scores: Verifier scores in [0, 1], None for unscorable rollouts.
        tool_calls: Tool calls each rollout made (same order and length).
        max_bonus: Largest efficiency bonus (reached at zero tool calls).

    Returns:
        One reward per rollout; None where the score is None.

    Raises:
        ValueError: Lengths differ, a tool-call count is negative or a score is outside [0, 1].
    """
    if len(scores) != len(tool_calls):
        raise ValueError(f"{len(scores)} scores but {len(tool_calls)} tool-call counts")
    if any(n < 0 for n in tool_calls):
        raise ValueError(f"negative tool-call count in {list(tool_calls)}")
    if any(s is not None and not 0.0 <= s <= 1.0 for s in scores):
        raise ValueError(f"scores must be in [0, 1] or None, got {list(scores)}")
    counted = [n for s, n in zip(scores, tool_calls, strict=True) if s is not None]
    mean = sum(counted) / len(counted) if counted else 0.0
    rewards: list[float | None] = []
    for s, n in zip(scores, tool_calls, strict=True):
        if s is None:
            rewards.append(None)
            continue
        bonus = max_bonus * (mean - n) / mean if s >= 1.0 and n < mean else 0.0
        rewards.append(float(s) + bonus)
    return rewards
