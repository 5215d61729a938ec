"""Tree-packed LFM2 hybrids (short convs beside attention) give the log-probs and LoRA gradients of unpacked runs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model

import harness_rl.train.tree_attention as tree_attention
from harness_rl.train.hybrid_conv import tree_causal_conv1d
from harness_rl.train.logprobs import packed_token_logprobs, padded_token_logprobs
from harness_rl.train.packing import pad_samples
from harness_rl.train.tree_attention import (
    check_tree_packing_supported,
    enable_tree_attention,
    tree_packing_supported,
)
from harness_rl.train.tree_index import TreeIndex, tree_index
from tests.tree_models import branching_samples, packed_row, reference_logprobs, tiny_lfm2, tiny_lfm2_moe

MODELS = {"lfm2": tiny_lfm2, "lfm2_moe": tiny_lfm2_moe}


def brute_force_tree(position_ids: torch.Tensor) -> tuple[list[int], list[int]]:
    """Parent and subtree end from DFS pre-order depths alone (the definition, one token at a time)."""
    depth, n = position_ids.tolist(), len(position_ids)
    parent = [max((j for j in range(i) if depth[j] == depth[i] - 1), default=-1) if depth[i] else -1 for i in range(n)]
    end = [next((k for k in range(i + 1, n) if depth[k] <= depth[i]), n) for i in range(n)]
    return parent, end


def test_tree_index_matches_brute_force() -> None:
    packed = packed_row(branching_samples())
    index = tree_index(packed["tree_kv_index"], packed["tree_cu_seqlens_q"], packed["tree_cu_seqlens_k"])
    parent, end = brute_force_tree(packed["position_ids"])
    assert index.parent.tolist() == parent
    assert index.subtree_end.tolist() == end
    assert torch.equal(index.depth, packed["position_ids"])
    segment_lengths = packed["tree_cu_seqlens_q"].diff()
    assert (segment_lengths == 1).any() and (segment_lengths == 2).any()  # shorter than the conv kernel
    assert int((index.parent == -1).sum()) == 2  # two roots


def test_tree_conv_on_a_chain_is_the_causal_conv() -> None:
    g = torch.Generator().manual_seed(0)
    x, weight, bias = torch.randn(1, 8, 11, generator=g), torch.randn(8, 3, generator=g), torch.randn(8, generator=g)
    chain = torch.arange(11) - 1
    expected = F.conv1d(x, weight[:, None], bias, padding=2, groups=8)[..., :11]
    torch.testing.assert_close(tree_causal_conv1d(x, weight, bias, chain), expected)


@pytest.mark.parametrize("mode", ["dense", "segments", "flex"])
@pytest.mark.parametrize("arch", list(MODELS))
def test_packed_logprobs_match_unpacked(arch: str, mode: str) -> None:
    model, samples = MODELS[arch](), branching_samples()
    packed = packed_row(samples)
    with torch.no_grad():
        reference = reference_logprobs(model, samples)
        enable_tree_attention(model)
        packed_lp = packed_token_logprobs(model, packed, tree_attention_mode=mode)
        # Plain forwards of the switched model still run transformers' own conv.
        again = reference_logprobs(model, samples)
    diff = (packed_lp - reference).abs().max().item()
    print(f"{arch} tree packing ({mode}) max |packed - unpacked| log-prob diff: {diff:.3e}")
    assert packed_lp.shape == packed["old_log_probs"].shape
    assert diff < 1e-5
    torch.testing.assert_close(again, reference, atol=0, rtol=0)


def test_longer_conv_kernel_crosses_several_short_segments() -> None:
    """With L_cache 6 a window spans the 1- and 2-token segments and reaches into the prompt."""
    model, samples = tiny_lfm2(conv_L_cache=6), branching_samples()
    with torch.no_grad():
        reference = reference_logprobs(model, samples)
        enable_tree_attention(model)
        packed_lp = packed_token_logprobs(model, packed_row(samples))
    assert (packed_lp - reference).abs().max().item() < 1e-5


def test_conv_in_packed_order_would_mix_branches(monkeypatch) -> None:
    """Guard for the test above: a parent index of "previous packed token" (what a plain conv does) is caught."""
    model, samples = tiny_lfm2(), branching_samples()

    def packed_order(kv, cu_q, cu_k) -> TreeIndex:
        right = tree_index(kv, cu_q, cu_k)
        return TreeIndex(torch.arange(len(right.parent)) - 1, right.depth, right.subtree_end)

    monkeypatch.setattr(tree_attention, "tree_index", packed_order)
    with torch.no_grad():
        reference = reference_logprobs(model, samples)
        enable_tree_attention(model)
        packed_lp = packed_token_logprobs(model, packed_row(samples), tree_attention_mode="dense")
    # 30x over the 1e-5 bound of the equality tests (random init keeps the conv's share of the output small).
    assert (packed_lp - reference).abs().max().item() > 1e-4


def lora_model(arch: str, checkpointing: str) -> torch.nn.Module:
    torch.manual_seed(3)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    model = get_peft_model(MODELS[arch](), lora)
    if checkpointing != "off":
        model.train()  # checkpointing is only active in training mode; the tiny models have no dropout
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": checkpointing == "reentrant"}
        )
        if checkpointing == "reentrant":
            model.enable_input_require_grads()  # reentrant checkpoints only backprop into inputs that need grad
    return model


@pytest.mark.parametrize(
    ("arch", "checkpointing"),
    [("lfm2", "off"), ("lfm2", "non_reentrant"), ("lfm2", "reentrant"), ("lfm2_moe", "off"), ("lfm2_moe", "reentrant")],
)
def test_lora_gradients_match_unpacked(arch: str, checkpointing: str) -> None:
    samples = branching_samples()
    packed = packed_row(samples)
    weights = torch.linspace(-1.0, 1.0, packed["token_index"].numel())
    grads, logprobs = {}, {}
    tree_conv_calls = []
    for how in ("unpacked", "packed"):
        model = lora_model(arch, checkpointing)
        if how == "packed":
            enable_tree_attention(model)
            convs = [m for m in model.modules() if type(m).__name__.endswith("ShortConv")]
            for conv in convs:
                conv.register_forward_hook(lambda m, *_: tree_conv_calls.append(m._tree_parent_index is not None))
            lp = packed_token_logprobs(model, packed, tree_attention_mode="segments")
        else:
            lp = reference_logprobs(model, samples)
        (lp * weights).sum().backward()  # backward long after the forward returned: no context held
        grads[how] = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        logprobs[how] = lp.detach()
    diff = (logprobs["packed"] - logprobs["unpacked"]).abs().max().item()
    print(f"{arch} LoRA (checkpointing {checkpointing}) max |packed - unpacked| log-prob diff: {diff:.3e}")
    assert diff < 1e-5
    assert grads["packed"].keys() == grads["unpacked"].keys()
    assert any(".conv.in_proj." in n for n in grads["packed"])  # the conv layers' projections are trained
    # Every conv call ran along the tree, including the recompute during backward when checkpointing.
    assert all(tree_conv_calls)
    assert len(tree_conv_calls) == len(convs) * (1 if checkpointing == "off" else 2)
    for name, grad in grads["unpacked"].items():
        torch.testing.assert_close(grads["packed"][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_padded_batches_still_work_on_a_switched_model() -> None:
    model, samples = tiny_lfm2(), branching_samples()
    with torch.no_grad():
        reference = reference_logprobs(model, samples)
        enable_tree_attention(model)
        padded_lp = padded_token_logprobs(model, pad_samples(samples))
    torch.testing.assert_close(padded_lp, reference, atol=1e-5, rtol=0)


def test_unswitched_conv_is_refused() -> None:
    model = tiny_lfm2()
    with tree_attention.attention_implementation(model, tree_attention.TREE_ATTENTION):
        with pytest.raises(RuntimeError, match="short-conv"):
            packed_token_logprobs(model, packed_row(branching_samples()))


class _FakeModel(torch.nn.Module):
    def __init__(self, layer_types: list[str]) -> None:
        super().__init__()
        self.config = type("Config", (), {"layer_types": layer_types})()


@pytest.mark.parametrize("arch", list(MODELS))
def test_lfm2_is_supported(arch: str) -> None:
    model = MODELS[arch]()
    check_tree_packing_supported(model)
    assert tree_packing_supported(get_peft_model(model, LoraConfig(r=2, target_modules="all-linear")))


@pytest.mark.parametrize(
    ("layer_types", "match"),
    [
        (["full_attention", "mamba"], "mamba"),
        (["linear_attention", "full_attention"], "linear_attention"),
        (["conv", "full_attention"], "short conv"),  # a conv layer of a class that cannot follow a tree
    ],
)
def test_other_mixers_are_refused(layer_types: list[str], match: str) -> None:
    model = _FakeModel(layer_types)
    with pytest.raises(ValueError, match=match):
        check_tree_packing_supported(model)
    assert not tree_packing_supported(model)
