"""The GRPO trainer steps on captured samples: LoRA weights move only with non-zero advantages, stale samples
are dropped, each step publishes the next adapter version atomically, and a checkpoint restores exactly."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from harness_rl.rollout.group import ScoredGroup
from harness_rl.train.checkpoint import load_checkpoint
from harness_rl.train.logprobs import sequence_token_logprobs
from harness_rl.train.trainer import PolicyTrainer


class RecordingRegistry:
    def __init__(self):
        self.published, self.retired = [], []

    def publish(self, harness, version, path):
        self.published.append((harness, version, str(path)))
        return f"{harness}-v{version}"

    def retire_older_than(self, harness, min_version):
        self.retired.append(min_version)
        return []


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True)  # fmt: skip
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


def trainer_cfg(**over):
    cfg = {
        "lr": 1e-2, "weight_decay": 0.0, "max_grad_norm": 1.0, "temperature": 0.8, "max_staleness": 1,
        "grad_accum": 2, "token_budget": 512, "clip_low": 0.2, "clip_high": 0.28, "packing": "tree",
        "train_dtype": "float32", "lora": {"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"},
    }  # fmt: skip
    cfg.update(over)
    return OmegaConf.create(cfg)


def make_group(trainer, group_id, version, advantages, prompt_len=12, completion_len=6):
    """A group whose samples share a prompt; old log-probs are the trainer's own (on-policy)."""
    gen = torch.Generator().manual_seed(group_id)
    prompt = torch.randint(0, 96, (prompt_len,), generator=gen)
    samples = []
    for i, adv in enumerate(advantages):
        ids = torch.cat([prompt, torch.randint(0, 96, (completion_len,), generator=gen)])
        mask = torch.cat([torch.zeros(prompt_len, dtype=torch.long), torch.ones(completion_len, dtype=torch.long)])
        with torch.no_grad():
            lp = sequence_token_logprobs(trainer.model, ids, mask, temperature=0.8)
        old = torch.zeros(len(ids))
        old[prompt_len:] = lp
        samples.append({"input_ids": ids, "completion_mask": mask, "old_log_probs": old, "advantage": adv,
                        "group_id": group_id, "policy_version": version, "rollout_index": i})  # fmt: skip
    group = ScoredGroup(group_id, f"task{group_id}", "h", version, [], list(advantages))
    group.samples = samples
    return group


@pytest.mark.parametrize("packing", ["tree", "padded"])
def test_step_moves_lora_and_publishes_next_version(tiny_model_dir, tmp_path, packing):
    registry = RecordingRegistry()
    trainer = PolicyTrainer(harness="h", model_path=tiny_model_dir, trainer_cfg=trainer_cfg(packing=packing),
                            family="llama", registry=registry, run_dir=tmp_path)  # fmt: skip
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
    trainer = PolicyTrainer(harness="h", model_path=tiny_model_dir, trainer_cfg=trainer_cfg(),
                            family="llama", registry=RecordingRegistry(), run_dir=tmp_path)  # fmt: skip
    before = trainer.lora_state()
    trainer.train_step([make_group(trainer, 0, 0, [0.0, 0.0])])
    after = trainer.lora_state()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_stale_samples_are_dropped(tiny_model_dir, tmp_path):
    trainer = PolicyTrainer(harness="h", model_path=tiny_model_dir, trainer_cfg=trainer_cfg(max_staleness=1),
                            family="llama", registry=RecordingRegistry(), run_dir=tmp_path)  # fmt: skip
    trainer.version = 3
    fresh, dropped = trainer.fresh_samples(
        [make_group(trainer, 0, 1, [1.0, -1.0]), make_group(trainer, 1, 2, [1.0, -1.0])]
    )
    assert dropped == 2 and {s["policy_version"] for s in fresh} == {2}


def test_checkpoint_round_trip(tiny_model_dir, tmp_path):
    trainer = PolicyTrainer(harness="h", model_path=tiny_model_dir, trainer_cfg=trainer_cfg(),
                            family="llama", registry=RecordingRegistry(), run_dir=tmp_path)  # fmt: skip
    trainer.train_step([make_group(trainer, 0, 0, [1.0, -1.0])])
    path = trainer.checkpoint()
    saved = trainer.lora_state()
    trainer.train_step([make_group(trainer, 1, 1, [1.0, -1.0])])
    state = load_checkpoint(trainer.model, trainer.optimizer, path)
    assert state["step"] == 1 and state["version"] == 1
    restored = trainer.lora_state()
    assert all(torch.equal(saved[k], restored[k]) for k in saved)
    assert not list(path.parent.glob(".step_*"))  # no temporary folder left behind


def test_hybrid_models_use_padded_batches(tiny_model_dir, tmp_path):
    trainer = PolicyTrainer(harness="h", model_path=tiny_model_dir, trainer_cfg=trainer_cfg(packing="auto"),
                            family="lfm2", registry=RecordingRegistry(), run_dir=tmp_path)  # fmt: skip
    assert trainer.packing == "padded"
