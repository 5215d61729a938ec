"""On CUDA a trainer step runs with the base in bf16, the LoRA parameters in fp32 and gradient checkpointing on, and
moves the adapter; the step's peak memory follows the token budget. Skipped with a reason without a CUDA device."""

from __future__ import annotations

import math

import pytest
import torch

from harness_rl.train.trainer import PolicyTrainer
from tests.trainer_doubles import RecordingRegistry, make_group, save_tiny_llama, trainer_cfg

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.mark.parametrize("packing", ["tree", "padded"])
def test_cuda_step_bf16_base_fp32_lora_checkpointing(tiny_model_dir, tmp_path, packing):
    cfg = trainer_cfg(packing=packing, device="cuda", token_budget=64)
    trainer = PolicyTrainer(
        harness="h",
        model_path=tiny_model_dir,
        trainer_cfg=cfg,
        family="llama",
        registry=RecordingRegistry(),
        run_dir=tmp_path,
    )
    assert (
        trainer.placement.describe()
        == f"cuda:{torch.cuda.current_device()} base=bfloat16 lora=float32 checkpointing=on"
    )
    frozen = [p for p in trainer.model.parameters() if not p.requires_grad]
    assert all(p.dtype == torch.bfloat16 and p.is_cuda for p in frozen)
    assert all(p.dtype == torch.float32 and p.is_cuda for p in trainer.params)
    groups = [make_group(trainer, g, 0, [1.0, -1.0, 0.5, -0.5]) for g in range(3)]
    before = trainer.lora_state()
    metrics = trainer.train_step(groups)
    after = trainer.lora_state()
    print(
        f"cuda {packing}: micro_batches={metrics['batch/micro_batches']} loss={metrics['train/loss']:+.5f} "
        f"onpolicy_absdiff_max={metrics['train/onpolicy_logprob_absdiff_max']:.2e} "
        f"peak_gib={metrics['memory/peak_gib']:.4f}"
    )
    assert metrics["batch/micro_batches"] > 1 and metrics["policy/version"] == 1
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(p.dtype == torch.float32 for p in trainer.params) and math.isfinite(metrics["train/loss"])
    # Recorded log-probs came from this very (bf16) model, so on-policy samples agree up to kernel noise.
    assert metrics["train/onpolicy_logprob_absdiff_max"] < 0.05
