"""Test doubles of the trainer tests: a recording adapter registry, a tiny saved llama, a trainer config and
on-policy sample groups."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from harness_rl.rollout.group import ScoredGroup
from harness_rl.train.logprobs import sequence_token_logprobs


class RecordingRegistry:
    def __init__(self):
        self.published, self.retired = [], []

    def publish(self, harness, version, path):
        self.published.append((harness, version, str(path)))
        return f"{harness}-v{version}"

    def retire_older_than(self, harness, min_version):
        self.retired.append(min_version)
        return []


def save_tiny_llama(path) -> str:
    """A 2-layer random llama saved to ``path`` (vocabulary 96), for building a PolicyTrainer from a directory."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


def trainer_cfg(**over):
    cfg = {
        "lr": 1e-2,
        "weight_decay": 0.0,
        "max_grad_norm": 1.0,
        "temperature": 0.8,
        "max_staleness": 1,
        "grad_accum": 2,
        "token_budget": 512,
        "tasks_per_step": 4,
        "clip_low": 0.2,
        "clip_high": 0.28,
        "packing": "tree",
        "train_dtype": "float32",
        "lora": {"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"},
    }
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
        samples.append(
            {
                "input_ids": ids,
                "completion_mask": mask,
                "old_log_probs": old,
                "advantage": adv,
                "group_id": group_id,
                "policy_version": version,
                "rollout_index": i,
            }
        )
    group = ScoredGroup(group_id, f"task{group_id}", "h", version, [], list(advantages))
    group.samples = samples
    return group
