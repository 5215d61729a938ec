"""Tiny random-weight models of the study's architectures and branching sample groups, for tree-packing tests."""

from __future__ import annotations

import torch
from transformers import Lfm2Config, Lfm2ForCausalLM, Lfm2MoeConfig, Lfm2MoeForCausalLM, LlamaConfig, LlamaForCausalLM

from harness_rl.train.logprobs import sequence_token_logprobs
from harness_rl.train.packing import TreeRow

VOCAB = 128
LFM_LAYERS = ["conv", "full_attention", "conv", "conv"]


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(config).float().eval()


def tiny_lfm2(seed: int = 0, conv_L_cache: int = 3) -> Lfm2ForCausalLM:
    """LFM2 with short-conv and attention layers; conv bias on, so the bias path is exercised too."""
    torch.manual_seed(seed)
    config = Lfm2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=len(LFM_LAYERS),
        num_attention_heads=4,
        num_key_value_heads=2,
        layer_types=LFM_LAYERS,
        conv_L_cache=conv_L_cache,
        conv_bias=True,
        max_position_embeddings=256,
        attn_implementation="sdpa",
    )
    return Lfm2ForCausalLM(config).float().eval()


def tiny_lfm2_moe(seed: int = 0) -> Lfm2MoeForCausalLM:
    """LFM2-MoE (the 24B-A2B architecture): one dense layer, then routed experts."""
    torch.manual_seed(seed)
    config = Lfm2MoeConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=len(LFM_LAYERS),
        num_attention_heads=4,
        num_key_value_heads=2,
        layer_types=LFM_LAYERS,
        num_dense_layers=1,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=256,
        attn_implementation="sdpa",
    )
    return Lfm2MoeForCausalLM(config).float().eval()


def _sample(ids: torch.Tensor, prompt: int, advantage: float, group: str, g: torch.Generator) -> dict:
    mask = torch.zeros(len(ids), dtype=torch.long)
    mask[prompt:] = 1
    if len(ids) > prompt + 4:
        mask[prompt + 2 : prompt + 4] = 0  # a tool output inside the continuation
    return {
        "input_ids": ids,
        "completion_mask": mask,
        "old_log_probs": -torch.rand(len(ids), generator=g) * mask,
        "advantage": advantage,
        "group_id": group,
    }


def branching_samples() -> list[dict]:
    """Two groups whose tries have every shape a conv window can straddle.

    Group A shares a 20-token prompt; below it: a long continuation, a single-token continuation, a 2-token
    turn (shorter than the conv kernel) under which a single-token step branches again (nested branches), and a
    sample that ends inside another's continuation. Group B is a second root.
    """
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, VOCAB, (20,), generator=g)
    # Distinct first tokens, so each branch really diverges where intended.
    a, b, t, x, y = (torch.tensor([v]) for v in (3, 4, 5, 6, 7))
    turn = torch.cat([t, torch.tensor([11])])  # a 2-token segment
    cont = torch.cat([a, torch.randint(0, VOCAB, (8,), generator=g)])
    ids = [
        torch.cat([prompt, cont]),
        torch.cat([prompt, b]),  # single-token branch
        torch.cat([prompt, turn, x, torch.randint(0, VOCAB, (5,), generator=g)]),
        torch.cat([prompt, turn, y, torch.randint(0, VOCAB, (4,), generator=g)]),
        torch.cat([prompt, turn, y]),  # ends where its sibling continues
        torch.cat([prompt, cont[:3]]),  # ends inside the first continuation
    ]
    samples = [_sample(s, 20, float(i) - 2.5, "A", g) for i, s in enumerate(ids)]
    other = torch.randint(0, VOCAB, (14,), generator=g)
    samples.append(_sample(other, 6, 1.0, "B", g))
    return samples


def packed_row(samples: list[dict]) -> dict[str, torch.Tensor]:
    row = TreeRow()
    for sample in samples:
        row.add(sample)
    return row.pack()


def reference_logprobs(model: torch.nn.Module, samples: list[dict]) -> torch.Tensor:
    """Per-sample unpacked forwards, concatenated in ``pack()``'s loss-term order."""
    return torch.cat([sequence_token_logprobs(model, s["input_ids"], s["completion_mask"]) for s in samples])


def long_branching_samples() -> list[dict]:
    """A GRPO-like group long enough for several 128-token tiles: a 150-token prompt, eight continuations (two
    of them retries after a shared extra turn), and a second group's sample as another root (~1,000 tokens)."""
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, VOCAB, (150,), generator=g)
    turn = torch.cat([prompt, torch.randint(0, VOCAB, (30,), generator=g)])
    samples = []
    for i in range(8):
        stem = turn if i >= 6 else prompt
        n = int(torch.randint(40, 120, (1,), generator=g))
        ids = torch.cat([stem, torch.tensor([i]), torch.randint(0, VOCAB, (n,), generator=g)])
        samples.append(_sample(ids, len(stem), float(i) - 3.5, "A", g))
    samples.append(_sample(torch.randint(0, VOCAB, (100,), generator=g), 60, 1.0, "B", g))
    return samples
