"""The benchmark's random-weight models: a Llama of SmolLM2-135M's width and a tiny hybrid LFM2, both with LoRA."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from peft import LoraConfig, get_peft_model
from transformers import Lfm2Config, Lfm2ForCausalLM, Lfm2MoeConfig, Lfm2MoeForCausalLM, LlamaConfig, LlamaForCausalLM

VOCAB = 49152  # SmolLM2's tokenizer: the fixture's token ids index it
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class Width:
    """Decoder width: SmolLM2-135M's by default (576 hidden, 9 heads, 3 KV heads); ``TINY`` for tests."""

    hidden: int = 576
    intermediate: int = 1536
    heads: int = 9
    kv_heads: int = 3


SMOLLM2_WIDTH = Width()
TINY = Width(hidden=32, intermediate=64, heads=4, kv_heads=2)


def make_base_model(layers: int, width: Width = SMOLLM2_WIDTH, seed: int = 0) -> LlamaForCausalLM:
    """Random Llama of the given width, SmolLM2's vocabulary and tied embeddings, in float32."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=width.hidden,
        intermediate_size=width.intermediate,
        num_hidden_layers=layers,
        num_attention_heads=width.heads,
        num_key_value_heads=width.kv_heads,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(config).float()


def make_model(layers: int, width: Width = SMOLLM2_WIDTH, lora_rank: int = 16, seed: int = 0) -> torch.nn.Module:
    """:func:`make_base_model` with LoRA on every projection, in training mode."""
    lora = LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, target_modules=LORA_TARGETS)
    return get_peft_model(make_base_model(layers, width, seed), lora).train()


HYBRID_LAYERS = ["conv", "full_attention", "conv", "full_attention"]


def make_hybrid_model(kind: str = "lfm2", seed: int = 0) -> torch.nn.Module:
    """Tiny random hybrid of the study's architectures (short-conv and attention layers), LoRA on all linears.

    ``kind`` is ``lfm2`` (transformers' ``Lfm2Config``) or ``lfm2_moe`` (``Lfm2MoeConfig``, the 24B-A2B
    architecture: a dense first layer, then routed experts). LoRA's B matrices start at zero, so they are
    randomised too: the packed path must get the adapter's contribution right, not only the base weights'.
    """
    torch.manual_seed(seed)
    shape = {
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": len(HYBRID_LAYERS),
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "layer_types": HYBRID_LAYERS,
        "max_position_embeddings": 8192,
        "attn_implementation": "sdpa",
    }
    if kind == "lfm2":
        base = Lfm2ForCausalLM(Lfm2Config(**shape))
    elif kind == "lfm2_moe":
        config = Lfm2MoeConfig(
            **shape, moe_intermediate_size=32, num_dense_layers=1, num_experts=4, num_experts_per_tok=2
        )
        base = Lfm2MoeForCausalLM(config)
    else:
        raise ValueError(f"hybrid model kind must be 'lfm2' or 'lfm2_moe', got {kind!r}")
    model = get_peft_model(base.float(), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.02)
    return model.eval()
