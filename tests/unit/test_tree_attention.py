"""Tree-packed forwards give every trained token the same log-prob and gradient as unpacked per-sample forwards.

LFM2 hybrids have their own file (test_hybrid_packing.py); this one covers attention and its kernels."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import Lfm2Config, Lfm2ForCausalLM, MistralConfig, MistralForCausalLM

from harness_rl.train.flex_tree_attention import tree_block_mask
from harness_rl.train.logprobs import packed_token_logprobs, padded_token_logprobs, sequence_token_logprobs
from harness_rl.train.packing import TreeRow, pad_samples
from harness_rl.train.tree_attention import (
    TREE_ATTENTION,
    attention_implementation,
    check_tree_packing_supported,
    enable_tree_attention,
    tree_ancestor_mask,
    tree_attention_kernels_used,
    tree_sdpa_attention,
)
from harness_rl.train.tree_index import tree_index
from tests.tree_models import VOCAB, tiny_llama

PROMPT = 24


def make_samples() -> list[dict]:
    """Four samples sharing a prompt; two of them also share a longer prefix (a retry after one more turn)."""
    g = torch.Generator().manual_seed(1)

    def rand(n: int) -> torch.Tensor:
        return torch.randint(0, VOCAB, (n,), generator=g)

    prompt = rand(PROMPT)
    turn = torch.cat([prompt, rand(10)])
    ids = [
        torch.cat([prompt, rand(7)]),
        torch.cat([prompt, rand(13)]),
        torch.cat([turn, rand(5)]),
        torch.cat([turn, rand(9)]),
    ]
    samples = []
    for i, x in enumerate(ids):
        mask = torch.zeros(len(x), dtype=torch.long)
        mask[PROMPT:] = 1
        mask[PROMPT + 3 : PROMPT + 5] = 0  # a tool output inside the continuation
        samples.append(
            {
                "input_ids": x,
                "completion_mask": mask,
                "old_log_probs": -torch.rand(len(x), generator=g) * mask,
                "advantage": float(i) - 1.5,
                "group_id": "task-a",
            }
        )
    return samples


def packed_row(samples: list[dict]) -> dict[str, torch.Tensor]:
    row = TreeRow()
    for sample in samples:
        row.add(sample)
    return row.pack()


def reference_logprobs(model: torch.nn.Module, samples: list[dict]) -> torch.Tensor:
    return torch.cat([sequence_token_logprobs(model, s["input_ids"], s["completion_mask"]) for s in samples])


@pytest.mark.parametrize("mode", ["dense", "segments", "auto"])
def test_packed_logprobs_match_unpacked(mode: str) -> None:
    model, samples = tiny_llama(), make_samples()
    packed = packed_row(samples)
    assert packed["input_ids"].numel() < sum(len(s["input_ids"]) for s in samples)  # something is shared
    with torch.no_grad():
        reference = reference_logprobs(model, samples)
        enable_tree_attention(model)
        packed_lp = packed_token_logprobs(model, packed, tree_attention_mode=mode)
    diff = (packed_lp - reference).abs().max().item()
    print(f"tree attention ({mode}) max |packed - unpacked| log-prob diff: {diff:.3e}")
    assert packed_lp.shape == packed["old_log_probs"].shape
    assert diff < 1e-4


def test_model_in_tree_mode_still_scores_plain_sequences() -> None:
    model, samples = tiny_llama(), make_samples()
    with torch.no_grad():
        reference = reference_logprobs(model, samples)
        enable_tree_attention(model)
        assert model.config._attn_implementation == TREE_ATTENTION
        again = reference_logprobs(model, samples)
    torch.testing.assert_close(again, reference, atol=1e-5, rtol=0)


def test_packed_requires_tree_mode() -> None:
    with pytest.raises(RuntimeError, match="enable_tree_attention"):
        packed_token_logprobs(tiny_llama(), packed_row(make_samples()))


def test_lora_logprobs_and_gradients_match_unpacked() -> None:
    samples = make_samples()
    packed = packed_row(samples)
    weights = torch.linspace(-1.0, 1.0, packed["token_index"].numel())
    grads = {}
    for how in ("unpacked", "packed"):
        torch.manual_seed(3)
        lora = LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], init_lora_weights=False
        )
        model = get_peft_model(tiny_llama(), lora)
        if how == "packed":
            enable_tree_attention(model)
            logprobs = packed_token_logprobs(model, packed)
        else:
            logprobs = reference_logprobs(model, samples)
        (logprobs * weights).sum().backward()
        grads[how] = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        grads[how + "_lp"] = logprobs.detach()
    diff = (grads["packed_lp"] - grads["unpacked_lp"]).abs().max().item()
    print(f"LoRA max |packed - unpacked| log-prob diff: {diff:.3e}")
    assert diff < 1e-4
    assert grads["packed"].keys() == grads["unpacked"].keys() and grads["packed"]
    for name, grad in grads["unpacked"].items():
        torch.testing.assert_close(grads["packed"][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def brute_force_mask(position_ids: torch.Tensor, window: int | None) -> torch.Tensor:
    """Ancestry from DFS pre-order alone: a token's parent is the latest earlier token one level up."""
    n = len(position_ids)
    depth = position_ids.tolist()
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j, d = i, depth[i]
        while True:
            if window is None or depth[i] - depth[j] < window:
                mask[i, j] = True
            if d == 0:
                break
            j = max(k for k in range(j) if depth[k] == d - 1)
            d -= 1
    return mask


@pytest.mark.parametrize("window", [None, 6])
def test_ancestor_mask_matches_brute_force(window: int | None) -> None:
    packed = packed_row(make_samples())
    mask = tree_ancestor_mask(packed["tree_kv_index"], packed["tree_cu_seqlens_q"], packed["tree_cu_seqlens_k"], window)
    assert torch.equal(mask, brute_force_mask(packed["position_ids"], window))


def test_dense_and_segments_agree_with_window_and_gqa() -> None:
    packed = packed_row(make_samples())
    n = packed["input_ids"].numel()
    g = torch.Generator().manual_seed(5)
    module = torch.nn.Module()
    module.num_key_value_groups = 2
    q = torch.randn(1, 4, n, 8, generator=g)
    k, v = (torch.randn(1, 2, n, 8, generator=g) for _ in range(2))
    tree = {key: packed[key] for key in ("tree_kv_index", "tree_cu_seqlens_q", "tree_cu_seqlens_k")}
    outs = [
        tree_sdpa_attention(module, q, k, v, None, **tree, sliding_window=6, scaling=0.3, tree_attention_mode=m)[0]
        for m in ("dense", "segments")
    ]
    assert outs[0].shape == (1, n, 4, 8)
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)
    softcapped = [
        tree_sdpa_attention(module, q, k, v, None, **tree, softcap=2.0, tree_attention_mode=m)[0]
        for m in ("dense", "segments")
    ]
    torch.testing.assert_close(softcapped[0], softcapped[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("window", "softcap"), [(None, None), (6, None), (None, 2.0), (6, 2.0)])
def test_flex_matches_dense(window: int | None, softcap: float | None) -> None:
    """The flex path (PyTorch's unfused flex reference on CPU, forward only) equals the dense one."""
    packed = packed_row(make_samples())
    n = packed["input_ids"].numel()
    g = torch.Generator().manual_seed(5)
    module = torch.nn.Module()
    module.num_key_value_groups = 2
    q = torch.randn(1, 4, n, 8, generator=g)
    k, v = (torch.randn(1, 2, n, 8, generator=g) for _ in range(2))
    tree = {key: packed[key] for key in ("tree_kv_index", "tree_cu_seqlens_q", "tree_cu_seqlens_k")}
    common = {"sliding_window": window, "softcap": softcap, "scaling": 0.3}
    dense = tree_sdpa_attention(module, q, k, v, None, **tree, **common, tree_attention_mode="dense")[0]
    flex = tree_sdpa_attention(module, q, k, v, None, **tree, **common, tree_attention_mode="flex")[0]
    torch.testing.assert_close(flex, dense, atol=1e-5, rtol=1e-5)
    assert "flex" in tree_attention_kernels_used()


@pytest.mark.parametrize("window", [None, 3, 9])
def test_flex_block_mask_covers_the_tree(window: int | None) -> None:
    """Tiles marked full are entirely visible, and every visible pair lies in a partial or full tile."""
    samples = make_samples()
    samples.append({**samples[0], "input_ids": torch.randint(0, VOCAB, (31,)), "group_id": "other"})
    samples[-1]["completion_mask"] = samples[-1]["old_log_probs"] = torch.zeros(31)
    packed = packed_row(samples)
    kv, cu_q, cu_k = packed["tree_kv_index"], packed["tree_cu_seqlens_q"], packed["tree_cu_seqlens_k"]
    index = tree_index(kv, cu_q, cu_k)
    n, block = kv.max().item() + 1, 8
    mask = tree_ancestor_mask(kv, cu_q, cu_k, window)
    block_mask = tree_block_mask(index.subtree_end, index.depth, window, block_size=block)
    n_blocks = -(-n // block)
    size = n_blocks * block
    visible = torch.zeros(size, size, dtype=torch.bool)
    visible[:n, :n] = mask
    any_visible = visible.view(n_blocks, block, n_blocks, block).any(dim=(1, 3))
    # Query rows past n are padding whose output is dropped: they pass the all-test; padded keys never do.
    visible[n:, :n] = True
    all_visible = visible.view(n_blocks, block, n_blocks, block).all(dim=(1, 3))
    full = torch.zeros(n_blocks, n_blocks, dtype=torch.bool)
    partial = torch.zeros(n_blocks, n_blocks, dtype=torch.bool)
    for qb in range(n_blocks):
        full[qb, block_mask.full_kv_indices[0, 0, qb, : block_mask.full_kv_num_blocks[0, 0, qb]].long()] = True
        partial[qb, block_mask.kv_indices[0, 0, qb, : block_mask.kv_num_blocks[0, 0, qb]].long()] = True
    assert not (full & partial).any()
    assert torch.equal(full & all_visible, full)  # a full tile skips the mask: it must be all visible
    assert torch.equal((full | partial) & any_visible, any_visible)  # nothing visible is skipped
    assert (~(full | partial)).any()  # and the kernel does skip tiles
    q_idx, kv_idx = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    assert torch.equal(block_mask.mask_mod(0, 0, q_idx, kv_idx), mask)


def tiny_lfm2() -> Lfm2ForCausalLM:
    torch.manual_seed(0)
    config = Lfm2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        layer_types=["conv", "full_attention"],
        attn_implementation="sdpa",
    )
    return Lfm2ForCausalLM(config).float().eval()


def test_hybrid_conv_model_is_accepted_and_other_mixers_refused() -> None:
    check_tree_packing_supported(tiny_lfm2())
    check_tree_packing_supported(tiny_llama())
    model = tiny_lfm2()
    model.config.layer_types = ["mamba", "full_attention"]
    with pytest.raises(ValueError, match="mamba"):
        enable_tree_attention(model)


@pytest.mark.parametrize("make_model", [tiny_llama, tiny_lfm2], ids=["llama", "lfm2"])
def test_padded_logprobs_match_unpacked(make_model) -> None:
    model, samples = make_model(), make_samples()
    padded = pad_samples(samples)
    with torch.no_grad():
        reference = reference_logprobs(model, samples)
        padded_lp = padded_token_logprobs(model, padded)
        # A Llama left in tree mode gets no padding mask: right padding must still be harmless.
        if make_model is tiny_llama:
            with attention_implementation(model, TREE_ATTENTION):
                torch.testing.assert_close(padded_token_logprobs(model, padded), reference, atol=1e-4, rtol=0)
    assert padded_lp.shape == padded["old_log_probs"].shape
    torch.testing.assert_close(padded_lp, reference, atol=1e-4, rtol=0)
    torch.testing.assert_close(padded["old_log_probs"], packed_row(samples)["old_log_probs"])


def test_several_roots_and_gradient_checkpointing() -> None:
    """A row holding two groups (two trie roots), trained with gradient checkpointing, still matches."""
    samples = make_samples()
    other = torch.randint(0, VOCAB, (30,), generator=torch.Generator().manual_seed(9))
    mask = torch.zeros(30, dtype=torch.long)
    mask[12:] = 1
    samples.append(
        {"input_ids": other, "completion_mask": mask, "old_log_probs": torch.zeros(30), "advantage": 1.0, "group_id": 2}
    )
    packed = packed_row(samples)
    assert int((packed["position_ids"] == 0).sum()) == 2
    model = tiny_llama()
    reference = reference_logprobs(model, samples)
    reference.sum().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.train()  # checkpointing is only active in training mode; the tiny model has no dropout
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    enable_tree_attention(model)
    logprobs = packed_token_logprobs(model, packed)
    torch.testing.assert_close(logprobs, reference, atol=1e-4, rtol=0)
    logprobs.sum().backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected[name], atol=1e-5, rtol=1e-4, msg=name)


def test_sliding_window_model_matches_unpacked() -> None:
    """Mistral's sliding-window layers: the window counts positions along each sample, not packed order."""
    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=8,
        attn_implementation="sdpa",
    )
    model, samples = MistralForCausalLM(config).float().eval(), make_samples()
    with torch.no_grad():
        reference = reference_logprobs(model, samples)
        enable_tree_attention(model)
        for mode in ("dense", "segments"):
            packed_lp = packed_token_logprobs(model, packed_row(samples), tree_attention_mode=mode)
            torch.testing.assert_close(packed_lp, reference, atol=1e-4, rtol=0)
