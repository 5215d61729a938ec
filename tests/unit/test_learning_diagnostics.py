"""The learning diagnostics each step logs are the quantities they claim to be, and the negative control's switch
flips the gradient.

Entropy at the trained positions equals ``torch.distributions.Categorical``'s on an unpacked forward (tree and
padded paths, chunked or not); the two KL-to-behaviour estimators, the advantage statistics and the share of groups
with reward variance match hand computations; ``trainer.advantage_sign=-1`` negates the step's gradient exactly.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import harness_rl.train.logprobs as logprobs_module
from harness_rl.rollout.group import ScoredGroup, group_metrics
from harness_rl.rollout.session import RolloutResult
from harness_rl.train.logprobs import packed_token_logprobs, padded_token_logprobs, row_entropy
from harness_rl.train.loss import advantage_stats, check_advantage_sign, grpo_loss
from harness_rl.train.packing import pad_samples
from harness_rl.train.step_plan import plan_step
from harness_rl.train.trainer import PolicyTrainer
from harness_rl.train.tree_attention import enable_tree_attention
from tests.trainer_doubles import RecordingRegistry, make_group, save_tiny_llama, trainer_cfg
from tests.tree_models import branching_samples, packed_row, tiny_llama

TEMPERATURE = 0.8


def reference_entropy(model: torch.nn.Module, samples: list[dict], temperature: float) -> torch.Tensor:
    """Categorical entropy of each sample's unpacked forward at its trained positions, in ``pack()``'s order."""
    out = []
    with torch.no_grad():
        for sample in samples:
            ids, mask = sample["input_ids"], sample["completion_mask"]
            logits = model(input_ids=ids[None], use_cache=False).logits[0].float() / temperature
            trained = torch.nonzero(mask[1:].bool()).squeeze(-1) + 1
            out.append(torch.distributions.Categorical(logits=logits[trained - 1]).entropy())
    return torch.cat(out)


@pytest.mark.parametrize("chunk_elements", [None, 300])  # 300: two rows of the 128-token vocabulary per chunk
def test_packed_entropy_equals_categorical(monkeypatch, chunk_elements) -> None:
    if chunk_elements:
        monkeypatch.setattr(logprobs_module, "ENTROPY_CHUNK_ELEMENTS", chunk_elements)
    samples = branching_samples()
    model = tiny_llama()
    reference = reference_entropy(model, samples, TEMPERATURE)
    enable_tree_attention(model)
    packed = packed_row(samples)
    with torch.no_grad():
        plain = packed_token_logprobs(model, packed, temperature=TEMPERATURE)
        logprobs, entropy = packed_token_logprobs(model, packed, temperature=TEMPERATURE, with_entropy=True)
    assert entropy.shape == logprobs.shape == (len(packed["old_log_probs"]),)
    torch.testing.assert_close(entropy, reference, atol=1e-4, rtol=0)
    torch.testing.assert_close(logprobs, plain, atol=0, rtol=0)  # asking for entropy leaves the log-probs alone
    # Not a constant: random-weight models still give per-position entropies that differ.
    assert float(entropy.std()) > 1e-3 and float(entropy.max()) < math.log(128)


@pytest.mark.parametrize("chunk_elements", [None, 300])
def test_padded_entropy_equals_categorical(monkeypatch, chunk_elements) -> None:
    if chunk_elements:
        monkeypatch.setattr(logprobs_module, "ENTROPY_CHUNK_ELEMENTS", chunk_elements)
    samples = branching_samples()
    model = tiny_llama()
    padded = pad_samples(samples)
    with torch.no_grad():
        logprobs, entropy = padded_token_logprobs(model, padded, temperature=TEMPERATURE, with_entropy=True)
        plain = padded_token_logprobs(model, padded, temperature=TEMPERATURE)
    torch.testing.assert_close(entropy, reference_entropy(model, samples, TEMPERATURE), atol=1e-4, rtol=0)
    torch.testing.assert_close(logprobs, plain, atol=0, rtol=0)


def test_row_entropy_of_known_distributions(monkeypatch) -> None:
    monkeypatch.setattr(logprobs_module, "ENTROPY_CHUNK_ELEMENTS", 4)  # one row per chunk
    logits = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],  # uniform over 4: log 4
            [5.0, -math.inf, -math.inf, -math.inf],  # one-hot (masked logits): 0, not NaN
            [math.log(3.0), 0.0, -math.inf, -math.inf],  # p = (3/4, 1/4)
        ],
        requires_grad=True,
    )
    entropy = row_entropy(logits)
    expected = [math.log(4), 0.0, -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))]
    assert entropy.tolist() == pytest.approx(expected, abs=1e-6)
    assert not entropy.requires_grad


def test_kl_to_behaviour_estimators_hand_computed() -> None:
    new = torch.tensor([-1.0, -0.5, -2.0, -0.1])
    old = torch.tensor([-1.2, -0.5, -1.0, -0.3])
    _, stats = grpo_loss(new, old, torch.tensor([1.0, -1.0, 1.0, -1.0]))
    log_r = [0.2, 0.0, -1.0, 0.2]
    k1 = sum(-x for x in log_r) / 4
    k3 = sum(math.exp(x) - 1 - x for x in log_r) / 4
    assert stats["kl_behaviour_k1"] == pytest.approx(k1, abs=1e-6)  # = 0.15
    assert stats["kl_behaviour_k3"] == pytest.approx(k3, abs=1e-6)
    assert stats["approx_kl"] == stats["kl_behaviour_k3"]  # the older name, read by the notebooks


def test_advantage_stats_of_a_known_step() -> None:
    stats = advantage_stats([1.5, -0.5, -0.5, -0.5, 0.0, 0.0])
    assert stats["adv/mean"] == pytest.approx(0.0)
    assert stats["adv/std"] == pytest.approx(math.sqrt((2.25 + 3 * 0.25) / 6))
    assert stats["adv/abs_mean"] == pytest.approx(3.0 / 6)
    assert (stats["adv/min"], stats["adv/max"]) == (-0.5, 1.5)
    assert stats["adv/positive_fraction"] == pytest.approx(1 / 6)
    assert stats["adv/zero_fraction"] == pytest.approx(2 / 6)
    assert set(advantage_stats([]).values()) == {0.0}


def _group(group_id: int, scores: list[float | None]) -> ScoredGroup:
    rollouts = [RolloutResult("t", None, None, None, s, None, 1, Path("."), 1.0, reward=s) for s in scores]
    return ScoredGroup(group_id, f"t{group_id}", "h", 0, rollouts, [0.0] * len(scores))


def test_groups_with_variance_fraction_counts_every_consumed_group() -> None:
    groups = [
        _group(0, [1.0, 0.0, 0.0]),  # variance
        _group(1, [1.0, 1.0, None]),  # all scorable rewards equal
        _group(2, [0.0, 0.0, 0.0]),  # all fail
        _group(3, [0.5, None, None]),  # one scorable rollout: no variance
        _group(4, [None, None, None]),  # nothing scorable
        _group(5, [0.25, 1.0, None]),  # variance
    ]
    metrics = group_metrics(groups)
    assert metrics["batch/groups_with_variance_fraction"] == pytest.approx(2 / 6)
    assert metrics["batch/groups_without_variance"] == 4
    assert group_metrics([])["batch/groups_with_variance_fraction"] == 0.0


@pytest.mark.parametrize("sign", [0, 0.5, 2.0, -1.5, True, "1"])
def test_advantage_sign_must_be_plus_or_minus_one(sign) -> None:
    with pytest.raises(ValueError, match=r"trainer\.advantage_sign must be 1 or -1"):
        check_advantage_sign(sign)
    assert check_advantage_sign(-1) == -1.0 and check_advantage_sign(1.0) == 1.0


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def _trainer(model_dir: str, run_dir: Path, **over) -> PolicyTrainer:
    return PolicyTrainer(
        harness="h",
        model_path=model_dir,
        trainer_cfg=trainer_cfg(**over),
        family="llama",
        registry=RecordingRegistry(),
        run_dir=run_dir,
    )


def test_trainer_rejects_a_bad_advantage_sign(tiny_model_dir, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"trainer\.advantage_sign"):
        _trainer(tiny_model_dir, tmp_path, advantage_sign=0.0)


@pytest.mark.parametrize("packing", ["tree", "padded"])
def test_flipped_advantage_sign_negates_the_gradient(tiny_model_dir, tmp_path, packing) -> None:
    """Same weights (LoRA seeded alike), same on-policy batch: the -1 gradient is exactly the +1 one negated."""
    grads = {}
    for sign in (1.0, -1.0):
        trainer = _trainer(tiny_model_dir, tmp_path / str(sign), packing=packing, advantage_sign=sign)
        group = make_group(trainer, 0, 0, [1.0, -0.5, 0.25, -0.75])
        plan = plan_step(group.samples, token_budget=trainer.cfg.token_budget, packing=trainer.packing)
        trainer.accumulate_gradients(plan.micro_batches, plan.trained_tokens)
        grads[sign] = torch.cat([p.grad.flatten() for p in trainer.params])
    assert float(grads[1.0].abs().max()) > 0
    torch.testing.assert_close(grads[-1.0], -grads[1.0], atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("packing", ["tree", "padded"])
def test_step_metrics_carry_the_diagnostics(tiny_model_dir, tmp_path, packing) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path, packing=packing, advantage_sign=-1.0)
    group = make_group(trainer, 0, 0, [1.0, -1.0, 0.5, 0.0])
    expected_entropy = float(reference_entropy(trainer.model, group.samples, TEMPERATURE).mean())
    metrics = trainer.train_step([group])
    assert metrics["train/entropy"] == pytest.approx(expected_entropy, abs=1e-4)
    # On-policy samples: the behaviour policy is the trainer's own, so both KL estimates are ~0 before the update.
    assert abs(metrics["train/kl_behaviour_k1"]) < 1e-5 and abs(metrics["train/kl_behaviour_k3"]) < 1e-5
    for key in ("train/clip_fraction", "train/clip_low_fraction", "train/clip_high_fraction", "train/grad_norm"):
        assert key in metrics
    assert metrics["train/grad_norm"] > 0
    # Advantages as trained, i.e. flipped by the negative control's sign.
    assert metrics["train/advantage_sign"] == -1.0
    assert metrics["adv/mean"] == pytest.approx(-0.125)
    assert (metrics["adv/min"], metrics["adv/max"]) == (-1.0, 1.0)
    assert metrics["adv/positive_fraction"] == pytest.approx(0.25)
    assert metrics["adv/zero_fraction"] == pytest.approx(0.25)
