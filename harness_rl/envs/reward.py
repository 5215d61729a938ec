"""Rewards of one GRPO group: correctness plus a small efficiency bonus.

    reward_i = score_i + bonus_i
    bonus_i  = MAX_EFFICIENCY_BONUS * (mean - n_i) / mean   if score_i == 1 and n_i < mean, else 0

where n_i is rollout i's tool calls and mean is the mean tool calls over the group's scorable rollouts. So
a correct rollout with no tool calls at all would get the full 0.1, one at the mean gets 0, and a wrong or
partly right rollout never gets a bonus: the bonus can only break ties among correct rollouts, never make
a wrong answer look better than a right one. Unscorable rollouts (score None) stay None and do not count
towards the mean.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_EFFICIENCY_BONUS = 0.1


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
