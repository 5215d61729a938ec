"""GRPO advantages and the clipped importance-weighted policy loss (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

LOSS_TYPES = ("token_mean", "sequence_mean", "token_sum")


def group_advantages(
    rewards: Sequence[float | None], *, scale_by_std: bool = True, eps: float = 1e-4
) -> list[float | None]:
    """GRPO advantages of one group: reward minus the mean of the group's scorable rewards.

    Args:
        rewards: One reward per rollout; None marks an unscorable rollout (e.g. its verifier crashed), which
            gets a None advantage and takes no part in the mean or std.
        scale_by_std: Divide by the (sample, ``n - 1``) standard deviation of the scorable rewards plus ``eps``,
            as in the GRPO paper; False gives Dr. GRPO's unscaled advantages.
        eps: Added to the std.

    Returns:
        One advantage per rollout. A group whose scorable rewards are all equal (or with a single scorable
        rollout) has nothing to learn from and gets exact zeros.
    """
    scored = [float(r) for r in rewards if r is not None]
    if any(not math.isfinite(r) for r in scored):
        raise ValueError(f"rewards must be finite or None, got {list(rewards)}")
    if not scored:
        return [None] * len(rewards)
    mean = sum(scored) / len(scored)
    spread = max(scored) - min(scored)
    std = math.sqrt(sum((r - mean) ** 2 for r in scored) / (len(scored) - 1)) if len(scored) > 1 else 0.0
    scale = (std + eps) if scale_by_std else 1.0
    return [None if r is None else (0.0 if spread == 0 else (float(r) - mean) / scale) for r in rewards]


def advantage_stats(advantages: Sequence[float]) -> dict[str, float]:
    """``adv/*`` metrics of a step's trained samples (one advantage each; population std); zeros when empty.

    ``zero_fraction`` counts samples that carry no gradient (the groups taken by the dynamic-sampling fallback).
    """
    values = [float(a) for a in advantages]
    n = len(values)
    if not n:
        keys = ("mean", "std", "abs_mean", "min", "max", "positive_fraction", "zero_fraction")
        return {f"adv/{key}": 0.0 for key in keys}
    mean = sum(values) / n
    return {
        "adv/mean": mean,
        "adv/std": math.sqrt(sum((a - mean) ** 2 for a in values) / n),
        "adv/abs_mean": sum(abs(a) for a in values) / n,
        "adv/min": min(values),
        "adv/max": max(values),
        "adv/positive_fraction": sum(a > 0 for a in values) / n,
        "adv/zero_fraction": sum(a == 0 for a in values) / n,
    }


def check_advantage_sign(sign: float) -> float:
    """``trainer.advantage_sign`` as a float, or ValueError unless it is +1 or -1.

    The switch exists only for the negative control (-1 flips every advantage, so training should not improve);
    any other value would silently rescale the learning rate.
    """
    if isinstance(sign, bool) or sign not in (1, -1):
        raise ValueError(
            f"trainer.advantage_sign must be 1 or -1 (-1 only for the negative control that flips every "
            f"advantage), got {sign!r}"
        )
    return float(sign)


def grpo_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    loss_type: str = "token_mean",
    segment_id: torch.Tensor | None = None,
    normalizer: float | None = None,
    dual_clip: float | None = None,
    max_log_ratio: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped importance-weighted policy-gradient loss over loss terms (one per trained token).

    Per token: ``r = exp(new - old)``, ``loss = -min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A)``
    (asymmetric "clip-higher" bounds as in DAPO).

    Two optional bounds on the off-policy tail, for tokens the sampler found far less likely than the trainer
    does (stale versions, or a train/inference mismatch). The asymmetric clip leaves ``-r * A`` unbounded for a
    negative advantage and a large ratio, so one such token can dominate a step:

    - ``dual_clip`` ``c`` (dual-clip PPO, Ye et al. 2020; verl's ``clip_ratio_c``): for ``A < 0`` the per-token
      loss is capped at ``-c * A``; a capped token has no gradient.
    - ``max_log_ratio`` (token masking, as prime-rl and verl's rollout correction do): a token with
      ``|new - old| > max_log_ratio`` contributes no loss and no gradient. It stays in the normaliser: the
      denominator of a step is fixed (its trained-token count) before any micro-batch is forwarded, which is what
      keeps the gradient the same however the step is split; masking then only removes the token's term.

    Args:
        new_logprobs: ``[M]`` log-probs under the current policy (differentiable).
        old_logprobs: ``[M]`` log-probs recorded by the sampler.
        advantages: ``[M]`` advantage of each token's sample.
        clip_low: Lower clip epsilon.
        clip_high: Upper clip epsilon.
        loss_type: ``"token_mean"`` (sum over tokens / ``normalizer`` or M), ``"sequence_mean"`` (mean over
            each sample's tokens, then over samples; needs ``segment_id``), or ``"token_sum"``.
        segment_id: ``[M]`` sample index of each token (``pack()``'s ``segment_id``).
        normalizer: For ``token_mean``, the denominator to use instead of M, e.g. the number of trained
            tokens of the whole optimizer step when it spans several micro-batches.
        dual_clip: The dual-clip bound ``c`` (> 1); None turns it off.
        max_log_ratio: The ``|log r|`` above which a token is masked (> 0); None turns it off.

    Returns:
        ``(loss, stats)`` with stats ``tokens``, ``ratio_mean``, ``kl_behaviour_k1`` (``old - new``),
        ``kl_behaviour_k3`` (``(r - 1) - log r``; also under its older name ``approx_kl``), ``clip_fraction``,
        ``clip_low_fraction``, ``clip_high_fraction`` (fraction of tokens whose gradient the clip removed),
        ``dual_clip_fraction`` (tokens capped by the dual clip) and ``masked_fraction`` (tokens masked by
        ``max_log_ratio``) as floats. Ratio, KL and clip statistics are over all tokens, masked or not.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (it caps the ratio of negative-advantage tokens), got {dual_clip}")
    if max_log_ratio is not None and max_log_ratio <= 0.0:
        raise ValueError(f"max_log_ratio must be > 0, got {max_log_ratio}")
    if not new_logprobs.shape == old_logprobs.shape == advantages.shape:
        raise ValueError(
            f"shape mismatch: new {tuple(new_logprobs.shape)}, old {tuple(old_logprobs.shape)}, "
            f"advantages {tuple(advantages.shape)}"
        )
    old_logprobs = old_logprobs.to(new_logprobs)
    advantages = advantages.to(new_logprobs)
    log_ratio = new_logprobs - old_logprobs
    masked = torch.zeros_like(log_ratio, dtype=torch.bool)
    if max_log_ratio is not None:
        masked = log_ratio.detach().abs() > max_log_ratio
        # exp of a huge masked log-ratio is inf, and 0 * inf in the backward of exp is NaN: replace the masked
        # log-ratios by a constant before exponentiating, so they carry exactly zero gradient.
        log_ratio = torch.where(masked, torch.zeros_like(log_ratio), log_ratio)
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    dual_clipped = torch.zeros_like(masked)
    if dual_clip is not None:
        cap = -dual_clip * advantages
        dual_clipped = (advantages < 0) & (per_token.detach() > cap)
        per_token = torch.where(dual_clipped, cap, per_token)
    per_token = torch.where(masked, torch.zeros_like(per_token), per_token)

    n = per_token.numel()
    if loss_type == "token_sum":
        loss = per_token.sum()
    elif loss_type == "token_mean":
        loss = per_token.sum() / (normalizer if normalizer is not None else max(n, 1))
    else:
        if segment_id is None:
            raise ValueError("loss_type='sequence_mean' needs segment_id")
        segment_id = segment_id.to(per_token.device)
        n_seq = int(segment_id.max()) + 1 if n else 0
        sums = per_token.new_zeros(n_seq).index_add(0, segment_id, per_token)
        counts = per_token.new_zeros(n_seq).index_add(0, segment_id, torch.ones_like(per_token))
        present = counts > 0
        loss = (sums[present] / counts[present]).mean() if n else per_token.sum()

    with torch.no_grad():
        raw_log_ratio = new_logprobs - old_logprobs
        raw_ratio = torch.exp(raw_log_ratio)
        low = (raw_ratio < 1 - clip_low) & (advantages < 0)
        high = (raw_ratio > 1 + clip_high) & (advantages > 0)
        denom = max(n, 1)
        k3 = float(((raw_ratio - 1) - raw_log_ratio).sum() / denom)
        stats = {
            "tokens": float(n),
            "ratio_mean": float(raw_ratio.sum() / denom),
            # KL(behaviour || current), the tokens being samples of the behaviour policy (Schulman's estimators): k1
            # is unbiased but noisy and can go negative, k3 is unbiased and never negative.
            "kl_behaviour_k1": float(-raw_log_ratio.sum() / denom),
            "kl_behaviour_k3": k3,
            "approx_kl": k3,
            "clip_fraction": float((low | high).sum() / denom),
            "clip_low_fraction": float(low.sum() / denom),
            "clip_high_fraction": float(high.sum() / denom),
            "dual_clip_fraction": float((dual_clipped & ~masked).sum() / denom),
            "masked_fraction": float(masked.sum() / denom),
        }
    return loss, stats
