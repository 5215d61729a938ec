"""On CUDA, the fused (flex) tree attention and hybrid tree packing equal unpacked forwards (fp32 tight, bf16 loose)."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import MistralConfig, MistralForCausalLM

from harness_rl.train.logprobs import packed_token_logprobs
from harness_rl.train.tree_attention import enable_tree_attention, tree_attention_kernels_used
from tests.tree_models import (
    VOCAB,
    branching_samples,
    long_branching_samples,
    packed_row,
    reference_logprobs,
    tiny_lfm2,
    tiny_lfm2_moe,
    tiny_llama,
)

pytestmark = pytest.mark.gpu

MODELS = {"llama": tiny_llama, "lfm2": tiny_lfm2, "lfm2_moe": tiny_lfm2_moe}
# bf16 base weights round every activation to ~3 significant digits; packed and unpacked runs round differently.
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 5e-2}


def tiny_mistral() -> MistralForCausalLM:
    """Sliding-window layers: the flex mask's window counts depth along each path."""
    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=64,
        max_position_embeddings=2048,
        attn_implementation="sdpa",
    )
    return MistralForCausalLM(config).float().eval()


def on_cuda(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    return model.to(device="cuda", dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("arch", ["llama", "mistral", "lfm2", "lfm2_moe"])
def test_fused_tree_attention_matches_unpacked(arch: str, dtype: torch.dtype) -> None:
    model = on_cuda(tiny_mistral() if arch == "mistral" else MODELS[arch](), dtype)
    samples = long_branching_samples()
    packed = packed_row(samples)
    assert packed["input_ids"].numel() > 4 * 128  # several flex tiles, most of them skipped
    with torch.no_grad():
        reference = reference_logprobs(model, samples)
        enable_tree_attention(model)
        fused = packed_token_logprobs(model, packed)  # auto: flex on CUDA
        dense = packed_token_logprobs(model, packed, tree_attention_mode="dense")
    assert "flex" in tree_attention_kernels_used()
    diff = (fused - reference).abs().max().item()
    print(f"{arch} {dtype} fused (flex) tree attention max |packed - unpacked| log-prob diff: {diff:.3e}")
    print(f"{arch} {dtype} dense tree attention max |packed - unpacked| diff: {(dense - reference).abs().max():.3e}")
    assert diff < TOLERANCE[dtype]


@pytest.mark.parametrize("arch", ["llama", "lfm2", "lfm2_moe"])
def test_lora_gradients_on_cuda_bf16_base(arch: str) -> None:
    """The trainer's GPU setup: bf16 base, fp32 LoRA, non-reentrant checkpointing, fused attention."""
    samples = long_branching_samples()
    packed = packed_row(samples)
    weights = torch.linspace(-1.0, 1.0, packed["token_index"].numel(), device="cuda")
    grads, logprobs = {}, {}
    for how in ("unpacked", "packed"):
        torch.manual_seed(3)
        lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
        model = get_peft_model(on_cuda(MODELS[arch](), torch.bfloat16), lora)
        for param in model.parameters():
            if param.requires_grad:
                param.data = param.data.float()
        model.train()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if how == "packed":
            enable_tree_attention(model)
            lp = packed_token_logprobs(model, packed)
        else:
            lp = reference_logprobs(model, samples)
        (lp * weights).sum().backward()
        grads[how] = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
        logprobs[how] = lp.detach()
    diff = (logprobs["packed"] - logprobs["unpacked"]).abs().max().item()
    rel = ((grads["packed"] - grads["unpacked"]).norm() / grads["unpacked"].norm()).item()
    print(f"{arch} bf16 base + fp32 LoRA: max log-prob diff {diff:.3e}, relative LoRA gradient error {rel:.3e}")
    assert diff < TOLERANCE[torch.bfloat16]
    assert rel < 5e-2


@pytest.mark.parametrize("arch", ["lfm2", "lfm2_moe"])
def test_hybrid_packing_on_cuda_fp32(arch: str) -> None:
    """The tree conv on CUDA (never the causal_conv1d kernel) with every tree shape of the CPU tests."""
    model, samples = on_cuda(MODELS[arch](), torch.float32), branching_samples()
    with torch.no_grad():
        reference = reference_logprobs(model, samples)
        enable_tree_attention(model)
        for mode in ("flex", "segments"):
            packed_lp = packed_token_logprobs(model, packed_row(samples), tree_attention_mode=mode)
            diff = (packed_lp - reference).abs().max().item()
            print(f"{arch} CUDA fp32 tree packing ({mode}) max |packed - unpacked| log-prob diff: {diff:.3e}")
            assert diff < 1e-4
