"""The GRPO trainer steps on captured samples: LoRA weights move only with non-zero advantages, stale samples
are dropped, each step publishes the next adapter version atomically (and an empty step publishes nothing), the
gradient does not depend on how the step is split into micro-batches, and the GPU precision path (bf16 base, fp32
LoRA, gradient checkpointing) runs on the CPU."""

from __future__ import annotations

import math

import pytest
import torch

from harness_rl.train.checkpoint import load_checkpoint
from harness_rl.train.step_plan import plan_step
from harness_rl.train.trainer import PolicyTrainer
from harness_rl.train.tree_attention import unwrap_peft
from tests.trainer_doubles import RecordingRegistry, make_group, save_tiny_llama, trainer_cfg


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.mark.parametrize("packing", ["tree", "padded"])
def test_step_moves_lora_and_publishes_next_version(tiny_model_dir, tmp_path, packing):
    registry = RecordingRegistry()
    trainer = PolicyTrainer(
        harness="h",
        model_path=tiny_model_dir,
        trainer_cfg=trainer_cfg(packing=packing),
        family="llama",
        registry=registry,
        run_dir=tmp_path,
    )
    trainer.publish()
    before = trainer.lora_state()
    metrics = trainer.train_step([make_group(trainer, 0, 0, [1.0, -1.0, 0.5, -0.5])])
    after = trainer.lora_state()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert registry.published == [("h", 0, str(tmp_path / "adapters/h-v0")), ("h", 1, str(tmp_path / "adapters/h-v1"))]
    assert (tmp_path / "adapters/h-v1/adapter_model.safetensors").exists()
    assert metrics["policy/adapter"] == "h-v1"
    # On-policy samples: the trainer's log-probs equal the recorded ones before the step.
    assert metrics["train/onpolicy_logprob_absdiff_max"] < 1e-5
    assert metrics["batch/samples_per_step"] == 4


def test_zero_advantage_group_leaves_weights_unchanged(tiny_model_dir, tmp_path):
    trainer = PolicyTrainer(
        harness="h",
        model_path=tiny_model_dir,
        trainer_cfg=trainer_cfg(),
        family="llama",
        registry=RecordingRegistry(),
        run_dir=tmp_path,
    )
    before = trainer.lora_state()
    trainer.train_step([make_group(trainer, 0, 0, [0.0, 0.0])])
    after = trainer.lora_state()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_stale_samples_are_dropped(tiny_model_dir, tmp_path):
    trainer = PolicyTrainer(
        harness="h",
        model_path=tiny_model_dir,
        trainer_cfg=trainer_cfg(max_staleness=1),
        family="llama",
        registry=RecordingRegistry(),
        run_dir=tmp_path,
    )
    trainer.version = 3
    fresh, dropped = trainer.fresh_samples(
        [make_group(trainer, 0, 1, [1.0, -1.0]), make_group(trainer, 1, 2, [1.0, -1.0])]
    )
    assert dropped == 2 and {s["policy_version"] for s in fresh} == {2}


def test_checkpoint_round_trip(tiny_model_dir, tmp_path):
    trainer = PolicyTrainer(
        harness="h",
        model_path=tiny_model_dir,
        trainer_cfg=trainer_cfg(),
        family="llama",
        registry=RecordingRegistry(),
        run_dir=tmp_path,
    )
    trainer.train_step([make_group(trainer, 0, 0, [1.0, -1.0])])
    path = trainer.checkpoint()
    saved = trainer.lora_state()
    trainer.train_step([make_group(trainer, 1, 1, [1.0, -1.0])])
    state = load_checkpoint(trainer.model, trainer.optimizer, path)
    assert state["step"] == 1 and state["version"] == 1
    restored = trainer.lora_state()
    assert all(torch.equal(saved[k], restored[k]) for k in saved)
    assert not list(path.parent.glob(".step_*"))  # no temporary folder left behind


def test_auto_packing_follows_the_model(tmp_path, monkeypatch):
    import harness_rl.train.trainer as trainer_module
    from tests.tree_models import tiny_lfm2

    lfm2_dir = tmp_path / "tiny-lfm2"
    tiny_lfm2().save_pretrained(lfm2_dir)

    def make():
        return PolicyTrainer(
            harness="h",
            model_path=str(lfm2_dir),
            trainer_cfg=trainer_cfg(packing="auto"),
            family="lfm2",
            registry=RecordingRegistry(),
            run_dir=tmp_path,
        )

    # The hybrid LFM2 (short convolutions beside attention) is tree-packed, and trains.
    trainer = make()
    assert trainer.packing == "tree"
    assert trainer.train_step([make_group(trainer, 0, 0, [1.0, -1.0])])["policy/version"] == 1
    # A model the tree cannot pack (recurrent layers, attention sinks) falls back to padded batches.
    monkeypatch.setattr(trainer_module, "tree_packing_supported", lambda model: False)
    assert make().packing == "padded"


def step_gradients(trainer, groups, *, token_budget, packing):
    """The LoRA gradient of one step's loss, planned with ``token_budget`` and ``packing`` (no optimizer step)."""
    samples, _ = trainer.fresh_samples(groups)
    plan = plan_step(samples, token_budget=token_budget, packing=packing)
    trainer.accumulate_gradients(plan.micro_batches, plan.trained_tokens)
    return len(plan.micro_batches), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def test_gradient_is_the_same_however_the_step_is_split(tiny_model_dir, tmp_path):
    trainer = PolicyTrainer(
        harness="h",
        model_path=tiny_model_dir,
        trainer_cfg=trainer_cfg(),
        family="llama",
        registry=RecordingRegistry(),
        run_dir=tmp_path,
    )
    torch.manual_seed(1)
    for p in trainer.params:  # LoRA B starts at zero, which would hide half of the gradient
        p.data.normal_(0.0, 0.05)
    groups = [make_group(trainer, g, 0, [1.0, -1.0, 0.5, -0.5][: 2 + g], completion_len=4 + 2 * g) for g in range(3)]
    n_one, one = step_gradients(trainer, groups, token_budget=4096, packing="tree")
    n_many, many = step_gradients(trainer, groups, token_budget=30, packing="tree")
    n_pad, padded = step_gradients(trainer, groups, token_budget=44, packing="padded")
    assert n_one == 1 and n_many >= 4 and n_pad >= 4
    assert any(g.abs().max() > 0 for g in one.values())
    for name in one:
        torch.testing.assert_close(many[name], one[name], rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(padded[name], one[name], rtol=1e-4, atol=1e-7)


def test_empty_step_neither_bumps_nor_publishes(tiny_model_dir, tmp_path):
    registry = RecordingRegistry()
    trainer = PolicyTrainer(
        harness="h",
        model_path=tiny_model_dir,
        trainer_cfg=trainer_cfg(token_budget=16),
        family="llama",
        registry=registry,
        run_dir=tmp_path,
    )
    before = trainer.lora_state()
    stale = make_group(trainer, 0, 0, [1.0, -1.0])
    too_long = make_group(trainer, 1, 0, [1.0, -1.0])  # 18 tokens per sample > token_budget 16
    for groups, version in (([], 0), ([too_long], 0), ([stale], 5)):
        trainer.version = version
        metrics = trainer.train_step(groups)
        assert metrics["train/empty_step"] == 1 and metrics["policy/version"] == version
        assert metrics["policy/adapter"] == f"h-v{version}" and trainer.step == 0
    assert metrics["batch/stale_samples_dropped"] == 2
    trainer.version = 0
    assert trainer.train_step([too_long])["batch/samples_over_budget"] == 2 and trainer.version == 0
    assert registry.published == [] and not (tmp_path / "adapters").exists()
    assert all(torch.equal(before[k], trainer.lora_state()[k]) for k in before)


def test_over_budget_sample_is_dropped_and_the_rest_trains(tiny_model_dir, tmp_path):
    registry = RecordingRegistry()
    trainer = PolicyTrainer(
        harness="h",
        model_path=tiny_model_dir,
        trainer_cfg=trainer_cfg(token_budget=20),
        family="llama",
        registry=registry,
        run_dir=tmp_path,
    )
    groups = [make_group(trainer, 0, 0, [1.0, -1.0]), make_group(trainer, 1, 0, [1.0, -1.0], completion_len=12)]
    metrics = trainer.train_step(groups + [make_group(trainer, g, 0, [1.0, -1.0]) for g in range(2, 6)])
    assert metrics["batch/samples_over_budget"] == 2 and metrics["batch/samples_per_step"] == 10
    # Any number of groups: as many micro-batches as they need (here more than grad_accum=2), each within budget.
    assert metrics["batch/micro_batches"] > 2 and metrics["batch/max_micro_batch_tokens"] <= 20
    assert metrics["policy/version"] == 1 and registry.published[-1][1] == 1


@pytest.mark.parametrize("packing", ["tree", "padded"])
def test_gpu_precision_path_on_cpu_bf16_base_fp32_lora_checkpointing(tiny_model_dir, tmp_path, packing):
    """The CUDA settings (bf16 base, fp32 LoRA, gradient checkpointing) through the same code, on the CPU."""
    cfg = trainer_cfg(packing=packing, device="cpu", train_dtype="bfloat16", gradient_checkpointing=True)
    trainer = PolicyTrainer(
        harness="h",
        model_path=tiny_model_dir,
        trainer_cfg=cfg,
        family="llama",
        registry=RecordingRegistry(),
        run_dir=tmp_path,
    )
    assert trainer.placement.describe() == "cpu base=bfloat16 lora=float32 checkpointing=on"
    frozen = [p for p in trainer.model.parameters() if not p.requires_grad]
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)
    assert trainer.params and all(p.dtype == torch.float32 for p in trainer.params)
    # Checkpointing really recomputes: a decoder layer's attention runs once in forward and again in backward.
    group = make_group(trainer, 0, 0, [1.0, -1.0, 0.5, -0.5])
    attention = unwrap_peft(trainer.model).model.layers[0].self_attn
    calls = []
    attention.register_forward_hook(lambda *args: calls.append(1))
    before = trainer.lora_state()
    metrics = trainer.train_step([group])
    assert len(calls) == 2 * metrics["batch/micro_batches"]
    assert any(not torch.equal(before[k], v) for k, v in trainer.lora_state().items())
    assert all(p.dtype == torch.float32 for p in trainer.params) and math.isfinite(metrics["train/loss"])
    # bf16 weights: the trainer's log-probs of its own samples are close to, not equal to, the fp32 reference.
    assert metrics["train/onpolicy_logprob_absdiff_max"] < 0.1


def test_cpu_default_is_fp32_without_checkpointing(tiny_model_dir, tmp_path):
    trainer = PolicyTrainer(
        harness="h",
        model_path=tiny_model_dir,
        trainer_cfg=trainer_cfg(),
        family="llama",
        registry=RecordingRegistry(),
        run_dir=tmp_path,
        device="cpu",
    )
    assert trainer.placement.describe() == "cpu base=float32 lora=float32 checkpointing=off"
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in trainer.model.parameters())
    assert not unwrap_peft(trainer.model).is_gradient_checkpointing
