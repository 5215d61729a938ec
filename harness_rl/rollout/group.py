"""A scored GRPO group: the rollouts of one task, their rewards and advantages, and the training samples."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from harness_rl.envs.reward import MAX_EFFICIENCY_BONUS, RewardParts, group_reward_parts
from harness_rl.envs.task import Task
from harness_rl.rollout.session import RolloutResult
from harness_rl.train.loss import group_advantages


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
        samples: Training samples (one per root-to-leaf path of each scorable rollout's graph; each sampled
            token carries loss in one of them only, see ``loss_once_masks``).
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
    def has_reward_variance(self) -> bool:
        """Whether the group's scorable rewards are not all equal (fewer than two scorable rollouts: no variance)."""
        return len({r for r in self.rewards if r is not None}) > 1

    @property
    def informative(self) -> bool:
        """Whether any advantage is non-zero: a group of equal rewards has no gradient."""
        return any(a for a in self.advantages if a is not None)


def loss_once_masks(trace: dict[str, Any]) -> list[list[int]]:
    """Each training sequence's loss mask, with every node's sampled tokens trained in exactly one sequence.

    Every root-to-leaf path of a rollout graph is one training sequence, so when the graph branches after a
    call (a retry, a compaction, a side call) each branch repeats its ancestors' completions; training on each
    copy would weight those tokens by the number of branches below them. The first sequence through a node
    keeps its loss there; later sequences keep the tokens as context (mask 0).

    Positions come from the graph, not from comparing token prefixes: a node on a sequence's path sits at
    ``[len(prompt), len(prompt) + len(completion))`` of that sequence (its prompt+completion is a prefix of
    the leaf's prompt), so two independent calls that sampled identical tokens are two nodes and both train.

    Raises:
        ValueError: A sequence names a node the trace does not have, or a node's span overruns the sequence.
    """
    nodes = {node["id"]: node for node in trace.get("nodes") or []}
    claimed: set[int] = set()
    masks = []
    for index, sequence in enumerate(trace["sequences"]):
        mask = list(sequence["loss_mask"])
        if "node_ids" not in sequence:
            raise ValueError(f"trace sequence {index} has no node_ids; loss cannot be assigned to its calls")
        for node_id in sequence["node_ids"]:
            node = nodes.get(node_id)
            if node is None:
                raise ValueError(f"trace sequence {index} names node {node_id}, which the trace's nodes lack")
            start = len(node["prompt_token_ids"])
            end = start + len(node["completion_token_ids"])
            if end > len(mask):
                raise ValueError(
                    f"trace sequence {index}: node {node_id} spans tokens {start}..{end} of a {len(mask)}-token "
                    "sequence (the trace's nodes and sequences disagree)"
                )
            if node_id in claimed:
                mask[start:end] = [0] * (end - start)
            else:
                claimed.add(node_id)
        masks.append(mask)
    return masks


def build_samples(group: ScoredGroup) -> list[dict[str, Any]]:
    """Turn each scorable rollout's training sequences into trainer samples carrying its advantage.

    The proxy's sequences are the ground truth (engine token ids); nothing here re-tokenizes. Each sampled
    token carries loss in exactly one sample (:func:`loss_once_masks`); a sequence left with no loss of its
    own is dropped (its tokens are trained in the sequences that keep them). Log-probs stay aligned with
    ``input_ids`` at every sampled position, trained or not.
    """
    samples: list[dict[str, Any]] = []
    for index, (rollout, advantage) in enumerate(zip(group.rollouts, group.advantages, strict=True)):
        if advantage is None or rollout.trace is None:
            continue
        masks = loss_once_masks(rollout.trace)
        for sequence, loss_mask in zip(rollout.trace["sequences"], masks, strict=True):
            input_ids = torch.tensor(sequence["input_ids"], dtype=torch.long)
            mask = torch.tensor(loss_mask, dtype=torch.long)
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


def score_group(
    group_id: int,
    task: Task,
    harness: str,
    version: int,
    rollouts: list[RolloutResult],
    reward_fn: Callable[[list[float | None], list[int]], list[float | None]] | None = None,
    scale_rewards: bool = True,
    on_rollout: Callable[[RolloutResult], None] | None = None,
    block_penalty: float = 0.0,
    efficiency_bonus: float = MAX_EFFICIENCY_BONUS,
) -> ScoredGroup:
    """Rewards (by component), advantages and samples of a finished group.

    The reward is ``harness_rl.envs.reward``'s: the verifier's score, plus up to ``efficiency_bonus``
    (``tasks.efficiency_bonus``) for a correct rollout with fewer tool calls than the group's mean, minus
    ``block_penalty`` (``safety.block_penalty``) per tool call the safety gate blocked, so attempted shortcuts
    cost reward even though they never ran. A ``reward_fn`` replaces score plus bonus (its excess over the score
    is logged as the efficiency component).
    """
    scores = [r.score for r in rollouts]
    calls = [r.tool_calls for r in rollouts]
    blocked = [len(r.blocked) for r in rollouts]
    parts = group_reward_parts(scores, calls, blocked, efficiency_bonus=efficiency_bonus, block_penalty=block_penalty)
    if reward_fn is not None:
        custom = reward_fn(scores, calls)
        parts = [
            None if p is None or c is None else RewardParts(p.correctness, c - p.correctness, p.block_penalty)
            for p, c in zip(parts, custom, strict=True)
        ]
    rewards = [None if p is None else p.total for p in parts]
    for rollout, part in zip(rollouts, parts, strict=True):
        rollout.reward = None if part is None else part.total
        rollout.reward_parts = None if part is None else part.as_dict()
        if on_rollout is not None:
            on_rollout(rollout)
    advantages = group_advantages(rewards, scale_by_std=scale_rewards)
    group = ScoredGroup(group_id, task.id, harness, version, rollouts, advantages)
    group.samples = build_samples(group)
    return group


def group_metrics(groups: list[ScoredGroup]) -> dict[str, Any]:
    """Reward, pass rate, tool calls, tokens, failure counts and reward variance over the groups of one step.

    The launcher passes every group the step consumed, skipped (uninformative) ones included, so
    ``batch/groups_with_variance_fraction`` is the share of scored groups GRPO could learn from at all.
    """
    rollouts = [r for g in groups for r in g.rollouts]
    with_variance = sum(g.has_reward_variance for g in groups)
    scored = [r for r in rollouts if r.reward is not None]
    solved = [r for r in scored if (r.score or 0) >= 1.0]

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    return {
        "rollout/count": len(rollouts),
        "rollout/unscorable": len(rollouts) - len(scored),
        "reward/mean": mean([r.reward for r in scored]),
        **{
            f"reward/{name}": mean([r.reward_parts[name] for r in scored if r.reward_parts])
            for name in ("correctness", "efficiency", "block_penalty")
        },
        "reward/pass_rate": len(solved) / len(scored) if scored else 0.0,
        "rollout/tool_calls_mean": mean([r.tool_calls for r in scored]),
        "rollout/tool_calls_solved_mean": mean([r.tool_calls for r in solved]),
        "rollout/requests_mean": mean([float((r.trace or {}).get("requests") or 0) for r in rollouts]),
        "rollout/seconds_mean": mean([r.seconds for r in rollouts]),
        "rollout/sampled_tokens": sum(
            len(n["completion_token_ids"]) for r in rollouts for n in (r.trace or {}).get("nodes", [])
        ),
        "batch/informative_groups": sum(g.informative for g in groups),
        "batch/groups_with_variance_fraction": with_variance / len(groups) if groups else 0.0,
        "batch/groups_without_variance": len(groups) - with_variance,
        **safety_metrics(rollouts),
    }


def safety_metrics(rollouts: list[RolloutResult]) -> dict[str, int]:
    """``safety/blocked`` (all blocked tool calls of the step) and ``safety/blocked/<rule>`` per rule."""
    by_rule = Counter(block.get("rule") or "unknown" for r in rollouts for block in r.blocked)
    return {
        "safety/blocked": sum(by_rule.values()),
        **{f"safety/blocked/{rule}": n for rule, n in sorted(by_rule.items())},
    }
