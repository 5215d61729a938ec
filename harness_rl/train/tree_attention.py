"""Tree attention: prefix-tree packed rows attended in pure PyTorch (any device), fused with flex on CUDA.

A packed row (`trl.experimental.async_grpo.packing.TreeRow.pack()`) lays a prefix trie of samples out in DFS
pre-order: a token shared by several samples is forwarded once. Every packed token must attend to exactly the
K/V of its root-to-node path (its ancestors and itself), which is what each sample saw when it was sampled.
TRL computes that with a FlashAttention-3 varlen kernel (GPU only); this module computes the same thing with
`torch.nn.functional.scaled_dot_product_attention`, so packing works on a laptop, in CI, and as a reference on
GPU.

Three strategies, picked per call (``tree_attention_mode``, a model kwarg; default ``"auto"``):

- ``dense``: one SDPA over the whole row with an ``[N, N]`` boolean ancestor mask. Few kernel launches; wastes
  work on masked cross-branch pairs and needs ``N * N`` bytes, so it is for short rows.
- ``segments``: one SDPA per trie segment against the K/V gathered along its path (the varlen layout of
  ``tree_kv_index`` / ``tree_cu_seqlens_*``). Does only the work of the tree; one launch per segment.
- ``flex``: PyTorch flex attention with a block-sparse mask built from ``O(N)`` numbers
  (:mod:`harness_rl.train.flex_tree_attention`): one fused kernel that skips the tiles no query sees. Compiled
  and used on CUDA; on CPU it runs PyTorch's unfused reference, forward only (tests).

``auto`` takes ``flex`` on CUDA when flex attention is importable (and attention dropout is off), else ``dense``
up to ``DENSE_MAX_TOKENS`` packed tokens and ``segments`` above; the first use of each kernel is logged
(:func:`tree_attention_kernels_used` lists them).

How transformers reaches this function: ``LlamaForCausalLM.forward(**kwargs)`` passes every extra keyword down
(``TransformersKwargs``) through the decoder layers to ``attention_interface(module, query, key, value,
attention_mask, dropout=..., scaling=..., sliding_window=..., **kwargs)``, where the interface is looked up by
``config._attn_implementation`` at *forward* time. So the tree tensors travel as plain model kwargs
(:func:`tree_kwargs`), and the mask function registered under the same name returns ``None`` so no ``[N, N]``
causal mask is built for a packed row.

Hybrid short-conv models (LFM2 and LFM2-MoE ``conv`` layers) are tree-packed too: their convolution follows each
token's own path (:mod:`harness_rl.train.hybrid_conv`, switched on by :func:`enable_tree_attention`), so a branch
never reads the tail of the sibling before it in packed order. Layers that scan the row in packed order and that
nothing here re-routes along the tree (Mamba, linear attention) and attention sinks are refused by
:func:`check_tree_packing_supported`; the trainer uses right-padded batches
(:func:`harness_rl.train.logprobs.padded_token_logprobs`) for those models.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface

from harness_rl.train.flex_tree_attention import flex_attention_available, flex_tree_attention
from harness_rl.train.hybrid_conv import TREE_PARENT_KWARG, conv_layers, enable_tree_conv
from harness_rl.train.tree_index import tree_ancestor_mask, tree_index

logger = logging.getLogger(__name__)

__all__ = [
    "TREE_ATTENTION",
    "check_tree_packing_supported",
    "enable_tree_attention",
    "tree_ancestor_mask",
    "tree_kwargs",
    "tree_packing_supported",
    "tree_sdpa_attention",
]

TREE_ATTENTION = "tree_sdpa"
"""Name under which the tree attention is registered in transformers' attention and mask interfaces."""

TREE_KWARG_NAMES = (
    "tree_kv_index",
    "tree_cu_seqlens_q",
    "tree_cu_seqlens_k",
    "tree_max_seqlen_q",
    "tree_max_seqlen_k",
    "tree_subtree_end",
    "tree_depth",
    TREE_PARENT_KWARG,
)

TREE_ATTENTION_MODES = ("auto", "dense", "segments", "flex")

DENSE_MAX_TOKENS = 1024
"""Rows up to this many packed tokens use the dense ancestor mask in ``mode="auto"`` (measured with
``python -m benchmarks.packing --tree-modes auto,dense,segments``: below it, fewer launches win; above it, the
tree's sparsity wins)."""

_ATTENTION_LAYER_TYPES = {"full_attention", "sliding_attention"}
_CONV_LAYER_TYPE = "conv"
_kernels_used: set[str] = set()


def tree_attention_kernels_used() -> frozenset[str]:
    """The tree-attention kernels (``dense``, ``segments``, ``flex``) this process has run so far."""
    return frozenset(_kernels_used)


def tree_kwargs(packed: dict[str, torch.Tensor], device: torch.device | str | None = None) -> dict[str, Any]:
    """The attention keyword arguments of one packed row, as the model forward expects them.

    Args:
        packed: Output of ``TreeRow.pack()``.
        device: Where the index tensors go (the model's device).

    Returns:
        ``tree_kv_index``, ``tree_cu_seqlens_q``, ``tree_cu_seqlens_k`` (tensors) and ``tree_max_seqlen_q``,
        ``tree_max_seqlen_k`` (ints), the same names TRL's FA3 tree attention takes; plus the per-token
        ``tree_subtree_end`` and ``tree_depth`` (the flex kernel's mask) and ``tree_parent_index`` (the path of
        the short convolutions of hybrid models), see :mod:`harness_rl.train.tree_index`.
    """
    max_q, max_k = (int(x) for x in packed["tree_max_seqlens"].tolist())
    kv_index = packed["tree_kv_index"].to(device)
    cu_q = packed["tree_cu_seqlens_q"].to(device)
    cu_k = packed["tree_cu_seqlens_k"].to(device)
    index = tree_index(kv_index, cu_q, cu_k)
    return {
        "tree_kv_index": kv_index,
        "tree_cu_seqlens_q": cu_q,
        "tree_cu_seqlens_k": cu_k,
        "tree_max_seqlen_q": max_q,
        "tree_max_seqlen_k": max_k,
        "tree_subtree_end": index.subtree_end,
        "tree_depth": index.depth,
        TREE_PARENT_KWARG: index.parent,
    }


def _attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    scaling: float | None,
    dropout: float,
    softcap: float | None,
) -> torch.Tensor:
    """SDPA over ``[B, H, Lq, D]`` x ``[B, H, L, D]`` with a boolean mask (None = causal, Lq == L)."""
    if not softcap:
        return F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, dropout_p=dropout, is_causal=mask is None, scale=scaling
        )
    # SDPA has no logit soft-capping (Gemma 2); spell the math out.
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = softcap * torch.tanh(query @ key.transpose(-1, -2) * scale / softcap)
    if mask is None:
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
    probs = scores.float().masked_fill(~mask, float("-inf")).softmax(-1).to(value.dtype)
    return F.dropout(probs, p=dropout) @ value


def _segment_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    tree_kv_index: torch.Tensor,
    tree_cu_seqlens_q: torch.Tensor,
    tree_cu_seqlens_k: torch.Tensor,
    **attend: Any,
) -> torch.Tensor:
    """Varlen loop: each segment's queries against the K/V gathered along its root-to-segment path."""
    sliding_window = attend.pop("sliding_window")
    outputs = []
    cu_q, cu_k = tree_cu_seqlens_q.tolist(), tree_cu_seqlens_k.tolist()
    for segment in range(len(cu_q) - 1):
        q_start, q_end, k_start, k_end = cu_q[segment], cu_q[segment + 1], cu_k[segment], cu_k[segment + 1]
        path = tree_kv_index[k_start:k_end]
        n_q, n_k = q_end - q_start, k_end - k_start
        mask = None
        if n_q != n_k or sliding_window:
            # Causal aligned bottom-right: the segment is the tail of its path.
            offset = torch.arange(n_k, device=query.device)[None, :] - torch.arange(n_q, device=query.device)[:, None]
            mask = offset <= n_k - n_q
            if sliding_window:
                mask &= offset > n_k - n_q - sliding_window
        outputs.append(
            _attend(
                query[:, :, q_start:q_end],
                key.index_select(2, path),
                value.index_select(2, path),
                mask,
                **attend,
            )
        )
    return torch.cat(outputs, dim=2)


def tree_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    tree_kv_index: torch.Tensor | None = None,
    tree_cu_seqlens_q: torch.Tensor | None = None,
    tree_cu_seqlens_k: torch.Tensor | None = None,
    tree_max_seqlen_q: int | None = None,
    tree_max_seqlen_k: int | None = None,
    tree_subtree_end: torch.Tensor | None = None,
    tree_depth: torch.Tensor | None = None,
    tree_attention_mode: str = "auto",
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention function for transformers' ``AttentionInterface`` (signature of ``sdpa_attention_forward``).

    Args:
        module: The attention layer (``num_key_value_groups`` and ``training`` are read from it).
        query: ``[1, H, N, D]`` for a packed row.
        key: ``[1, H_kv, N, D]``.
        value: ``[1, H_kv, N, D]``.
        attention_mask: Ignored for a packed row (the registered mask function returns None).
        tree_kv_index: See :func:`tree_kwargs`. Without it (a plain forward of unpacked or right-padded
            sequences) this is ordinary causal SDPA, so a model switched to tree attention still scores
            single sequences correctly.
        tree_cu_seqlens_q: Segment boundaries in the row.
        tree_cu_seqlens_k: Path boundaries in ``tree_kv_index``.
        tree_max_seqlen_q: Unused (the FA3 kernel's sizing hint), accepted for TRL compatibility.
        tree_max_seqlen_k: Unused, as above.
        tree_subtree_end: Per-token subtree ends (flex mask); derived from the tensors above when None.
        tree_depth: Per-token depths (flex windows); derived when None.
        tree_attention_mode: One of ``TREE_ATTENTION_MODES`` (see the module docstring).
        dropout: Attention dropout probability, applied in training mode only.
        scaling: Softmax scale (``head_dim ** -0.5`` when None).
        sliding_window: Window of sliding-attention layers, counted in path positions (depth).
        softcap: Attention logit soft-capping.
        **kwargs: Everything else the model forwards (``position_ids``, ``tree_parent_index``, ...), ignored.

    Returns:
        ``([1, N, H, D] attention output, None)``.
    """
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError("tree attention does not support attention sinks (s_aux)")
    if tree_kv_index is None:
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            sliding_window=sliding_window,
            softcap=softcap,
            **kwargs,
        )
    if query.shape[0] != 1:
        raise ValueError(f"a packed tree row has batch size 1, got query of shape {tuple(query.shape)}")
    attend = {
        "scaling": scaling,
        "dropout": dropout if module.training else 0.0,
        "softcap": softcap,
    }
    n_tokens = query.shape[2]
    if tree_attention_mode not in TREE_ATTENTION_MODES:
        raise ValueError(f"tree_attention_mode must be one of {TREE_ATTENTION_MODES}, got {tree_attention_mode!r}")
    if tree_attention_mode == "auto":
        if flex_attention_available(query.device) and not attend["dropout"]:
            tree_attention_mode = "flex"
        else:
            tree_attention_mode = "dense" if n_tokens <= DENSE_MAX_TOKENS else "segments"
    if tree_attention_mode not in _kernels_used:
        _kernels_used.add(tree_attention_mode)
        logger.info("tree attention: %s kernel (%s, %d packed tokens)", tree_attention_mode, query.device, n_tokens)
    if tree_attention_mode == "flex":
        if attend["dropout"]:
            raise ValueError("tree_attention_mode='flex' has no attention dropout; use 'dense' or 'segments'")
        if tree_subtree_end is None or tree_depth is None:
            index = tree_index(tree_kv_index, tree_cu_seqlens_q, tree_cu_seqlens_k)
            tree_subtree_end, tree_depth = index.subtree_end, index.depth
        # The kernel handles grouped-query heads itself: no repeated K/V.
        out = flex_tree_attention(
            query,
            key,
            value,
            subtree_end=tree_subtree_end,
            depth=tree_depth,
            scaling=scaling,
            sliding_window=sliding_window,
            softcap=softcap,
        )
        return out.transpose(1, 2).contiguous(), None
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        # Masked SDPA with enable_gqa falls back to the math kernel on CUDA; repeating is the portable choice.
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    if tree_attention_mode == "dense":
        mask = tree_ancestor_mask(tree_kv_index, tree_cu_seqlens_q, tree_cu_seqlens_k, sliding_window)
        out = _attend(query, key, value, mask[None, None], **attend)
    else:
        out = _segment_attention(
            query,
            key,
            value,
            tree_kv_index,
            tree_cu_seqlens_q,
            tree_cu_seqlens_k,
            sliding_window=sliding_window,
            **attend,
        )
    return out.transpose(1, 2).contiguous(), None


def register_tree_attention() -> None:
    """Register :func:`tree_sdpa_attention` as ``"tree_sdpa"`` (idempotent)."""
    AttentionInterface.register(TREE_ATTENTION, tree_sdpa_attention)
    # No [N, N] mask for a packed row: the attention function builds what it needs from the tree tensors.
    AttentionMaskInterface.register(TREE_ATTENTION, lambda *args, **kwargs: None)


def unwrap_peft(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a PEFT wrapper (or the model itself)."""
    get_base_model = getattr(model, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else model


def check_tree_packing_supported(model: torch.nn.Module) -> None:
    """Raise ValueError when the model cannot be trained on tree-packed rows.

    Attention layers and the short convolutions of LFM2 / LFM2-MoE (run along the tree by
    :mod:`harness_rl.train.hybrid_conv`) are supported. Other layers that scan the row in packed order (Mamba,
    linear attention, a ``conv`` layer of an unknown class) would mix branches, and attention sinks are not
    implemented here; such models use padded batches instead.
    """
    base = unwrap_peft(model)
    config = base.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = list(getattr(text_config, "layer_types", None) or [])
    other_layers = set(layer_types) - _ATTENTION_LAYER_TYPES - {_CONV_LAYER_TYPE}
    if other_layers:
        raise ValueError(
            f"{type(base).__name__} has {sorted(other_layers)} layers, which mix tokens in packed order; tree "
            "packing supports attention and LFM2 short-conv layers only. Use padded batches (trainer.packing=padded)."
        )
    n_conv = layer_types.count(_CONV_LAYER_TYPE)
    if n_conv and len(conv_layers(base)) != n_conv:
        raise ValueError(
            f"{type(base).__name__} declares {n_conv} 'conv' layers but {len(conv_layers(base))} are LFM2 short "
            "convolutions that can follow a tree; tree packing would mix branches. Use padded batches "
            "(trainer.packing=padded)."
        )
    if any(name.endswith(".sinks") for name, _ in model.named_parameters()):
        raise ValueError("tree attention does not support attention sinks; use padded batches (trainer.packing=padded)")


def tree_packing_supported(model: torch.nn.Module) -> bool:
    """Whether :func:`check_tree_packing_supported` accepts the model (choose tree rows or padded batches)."""
    try:
        check_tree_packing_supported(model)
    except ValueError:
        return False
    return True


def uses_tree_attention(model: torch.nn.Module) -> bool:
    """Whether the model currently dispatches attention to the tree implementation."""
    return unwrap_peft(model).config._attn_implementation == TREE_ATTENTION


def enable_tree_attention(model: torch.nn.Module) -> None:
    """Check the model and switch it (in place, PEFT wrapper or not) to tree attention and tree convolutions.

    Switch once and keep it: the implementation is looked up at forward time, so a gradient-checkpointing
    recompute during backward must find the same one that ran forward. Plain forwards (no tree kwargs) of the
    switched model are unchanged: causal SDPA and transformers' own short convolution.
    """
    check_tree_packing_supported(model)
    register_tree_attention()
    base = unwrap_peft(model)
    base.set_attn_implementation(TREE_ATTENTION)
    enable_tree_conv(base)


@contextlib.contextmanager
def attention_implementation(model: torch.nn.Module, name: str) -> Iterator[None]:
    """Temporarily run the model with another attention implementation (tests, references)."""
    if name == TREE_ATTENTION:
        register_tree_attention()
    base = unwrap_peft(model)
    previous = base.config._attn_implementation
    base.set_attn_implementation(name)
    try:
        yield
    finally:
        base.set_attn_implementation(previous)
