"""GRPO advantages and the clipped policy loss match hand-computed values, including clipping and unscorables."""

from __future__ import annotations

import math

import pytest
import torch

from harness_rl.train.loss import group_advantages, grpo_loss


def test_advantages_hand_computed() -> None:
    # mean 0.5, sample std sqrt(1/3)
    adv = group_advantages([1.0, 0.0, 1.0, 0.0], eps=0.0)
    assert adv == pytest.approx([0.5 / math.sqrt(1 / 3), -0.5 / math.sqrt(1 / 3)] * 2)
    assert group_advantages([1.0, 0.0, 0.5], scale_by_std=False) == pytest.approx([0.5, -0.5, 0.0])


def test_advantages_exclude_unscorable() -> None:
    adv = group_advantages([1.0, None, 0.0, None], scale_by_std=False)
    assert adv[1] is None and adv[3] is None
    assert adv[0] == pytest.approx(0.5) and adv[2] == pytest.approx(-0.5)
    assert group_advantages([None, None]) == [None, None]


def test_zero_variance_gives_zeros() -> None:
    assert group_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert group_advantages([0.3, None]) == [0.0, None]
    with pytest.raises(ValueError):
        group_advantages([float("nan"), 1.0])


def test_on_policy_loss_is_minus_mean_advantage_with_policy_gradient() -> None:
    new = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    adv = torch.tensor([1.0, -1.0, 2.0])
    loss, stats = grpo_loss(new, new.detach().clone(), adv)
    assert loss.item() == pytest.approx(-(1 - 1 + 2) / 3)
    loss.backward()
    torch.testing.assert_close(new.grad, -adv / 3)  # d(-r*A)/d(logp) = -A at r = 1
    assert stats["ratio_mean"] == pytest.approx(1.0) and stats["approx_kl"] == pytest.approx(0.0)
    assert stats["clip_fraction"] == 0.0 and stats["tokens"] == 3


def test_clipping_hand_computed() -> None:
    old = torch.zeros(4)
    ratios = torch.tensor([1.5, 1.5, 0.5, 0.5])
    new = ratios.log().requires_grad_()
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, stats = grpo_loss(new, old, adv, clip_low=0.2, clip_high=0.28)
    # per token -min(r*A, clip(r)*A): [-1.28, 1.5, -0.5, 0.8]
    assert loss.item() == pytest.approx((-1.28 + 1.5 - 0.5 + 0.8) / 4)
    loss.backward()
    # Clipped tokens (high with A>0, low with A<0) get no gradient; the others get -r*A/4.
    torch.testing.assert_close(new.grad, torch.tensor([0.0, 1.5 / 4, -0.5 / 4, 0.0]))
    assert stats["clip_fraction"] == pytest.approx(0.5)
    assert stats["clip_high_fraction"] == pytest.approx(0.25) and stats["clip_low_fraction"] == pytest.approx(0.25)
    assert stats["ratio_mean"] == pytest.approx(1.0)
    expected_kl = sum((r - 1) - math.log(r) for r in [1.5, 1.5, 0.5, 0.5]) / 4
    assert stats["approx_kl"] == pytest.approx(expected_kl, rel=1e-5)


def test_loss_types() -> None:
    new = torch.zeros(3)
    adv = torch.tensor([1.0, 1.0, 4.0])
    seg = torch.tensor([0, 0, 1])
    assert grpo_loss(new, new, adv, loss_type="token_sum")[0].item() == pytest.approx(-6.0)
    assert grpo_loss(new, new, adv, normalizer=6.0)[0].item() == pytest.approx(-1.0)
    # sequence 0 mean -1, sequence 1 mean -4
    assert grpo_loss(new, new, adv, loss_type="sequence_mean", segment_id=seg)[0].item() == pytest.approx(-2.5)
    with pytest.raises(ValueError, match="segment_id"):
        grpo_loss(new, new, adv, loss_type="sequence_mean")
    with pytest.raises(ValueError, match="loss_type"):
        grpo_loss(new, new, adv, loss_type="bogus")


def test_dual_clip_caps_negative_advantage_tokens_hand_computed() -> None:
    old = torch.zeros(4)
    new = torch.tensor([4.0, 2.0, 4.0, 0.5]).log().requires_grad_()
    adv = torch.tensor([-1.0, -1.0, 1.0, -2.0])
    loss, stats = grpo_loss(new, old, adv, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    # per token: r=4,A=-1 -> 4 capped at -c*A = 3; r=2,A=-1 -> 2 (under the cap); r=4,A=1 -> -1.28 (clip-high);
    # r=0.5,A=-2 -> -min(-1, -1.6) = 1.6 (clip-low)
    assert loss.item() == pytest.approx((3.0 + 2.0 - 1.28 + 1.6) / 4)
    loss.backward()
    # Only the uncapped, unclipped token keeps its gradient -r*A/4.
    torch.testing.assert_close(new.grad, torch.tensor([0.0, 2.0 / 4, 0.0, 0.0]))
    assert stats["dual_clip_fraction"] == pytest.approx(0.25) and stats["masked_fraction"] == 0.0
    # Off, the first token's loss is its full -r*A = 4.
    assert grpo_loss(new, old, adv)[0].item() == pytest.approx((4.0 + 2.0 - 1.28 + 1.6) / 4)
    assert grpo_loss(new, old, adv)[1]["dual_clip_fraction"] == 0.0


def test_max_log_ratio_masks_tokens_but_keeps_them_in_the_normaliser() -> None:
    old = torch.zeros(4)
    new = torch.tensor([4.0, 2.0, 0.2, 1.0]).log().requires_grad_()
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    loss, stats = grpo_loss(new, old, adv, max_log_ratio=1.0)
    # |log r| = [1.39, 0.69, 1.61, 0]: tokens 0 and 2 are masked; the others give 2 and -1, over all 4 tokens.
    assert loss.item() == pytest.approx((2.0 - 1.0) / 4)
    loss.backward()
    torch.testing.assert_close(new.grad, torch.tensor([0.0, 2.0 / 4, 0.0, -1.0 / 4]))
    assert stats["masked_fraction"] == pytest.approx(0.5) and stats["tokens"] == 4


def test_masked_huge_log_ratio_gives_finite_zero_gradient() -> None:
    new = torch.tensor([60.0, -1.0], requires_grad=True)  # exp(120) overflows float32
    old = torch.tensor([-60.0, -1.0])
    loss, stats = grpo_loss(new, old, torch.tensor([-1.0, 1.0]), max_log_ratio=5.0, dual_clip=3.0)
    loss.backward()
    assert torch.isfinite(loss) and torch.equal(new.grad, torch.tensor([0.0, -0.5]))
    assert stats["masked_fraction"] == 0.5 and stats["dual_clip_fraction"] == 0.0


def test_off_policy_bounds_reject_meaningless_values() -> None:
    x = torch.zeros(2)
    with pytest.raises(ValueError, match="dual_clip"):
        grpo_loss(x, x, x, dual_clip=0.9)
    with pytest.raises(ValueError, match="max_log_ratio"):
        grpo_loss(x, x, x, max_log_ratio=0.0)
