"""Tree packing for hybrid short-convolution models (LFM2, LFM2-MoE): each conv reads its own path's window.

An LFM2 ``conv`` layer (``Lfm2ShortConv``) is ``in_proj -> B, C, x``; ``B * x``; a depthwise causal conv1d of
kernel ``L = conv_L_cache``; ``C * conv``; ``out_proj``. Run over a prefix-tree packed row as transformers runs it,
the conv would read the previous ``L - 1`` tokens in *packed* order, so the first tokens of a branch would mix in
the tail of the sibling branch that precedes it in DFS pre-order. Here the same conv is computed along the tree:

    out[i] = bias + sum_k weight[:, L - 1 - k] * x[ancestor_k(i)]      (zero past the root)

with ``ancestor_k`` the ``k``-th previous token on ``i``'s own path (:mod:`harness_rl.train.tree_index`). That is
``O(N * L)`` gathers, no mask, and is exactly what the unpacked forward of every sample through ``i`` computes.

How the tree reaches the conv: ``Lfm2DecoderLayer.forward(**kwargs)`` passes the model's extra keyword arguments
to its attention but calls ``self.conv(...)`` with fixed arguments only. :func:`enable_tree_conv` therefore

1. replaces the ``forward`` of every short-conv module (instance attribute: parameter names, and so the saved
   adapter's keys, are unchanged) by :func:`_tree_short_conv_forward`, which runs the tree conv when the module
   holds a parent index and transformers' own forward otherwise (plain, unpacked or padded forwards, and
   generation, are untouched); and
2. registers a forward pre-hook on each decoder layer that hands the layer's ``tree_parent_index`` keyword
   argument to its conv for the span of that one layer call (a forward hook clears it).

Gradient checkpointing recomputes a layer by calling it again with the same keyword arguments
(``GradientCheckpointingLayer`` checkpoints ``partial(Module.__call__, **kwargs)``, reentrant or not), so the
hooks run again and the recompute sees the same tree: no state outlives a layer call and the caller holds no
context through backward. The tree conv never calls the ``causal_conv1d`` CUDA kernel (it has no notion of a
tree); it is a few gathers and multiply-adds on any device.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F

from harness_rl.train.tree_index import ancestors

TREE_PARENT_KWARG = "tree_parent_index"
"""Model keyword argument carrying each packed token's parent (``LongTensor[N]``, ``-1`` for a root token)."""

_PARENT_ATTR = "_tree_parent_index"
_HOOKED_ATTR = "_tree_conv_hooks"


def short_conv_classes() -> tuple[type[torch.nn.Module], ...]:
    """The short-convolution module classes this module knows how to run over a tree (LFM2 dense and MoE)."""
    classes = []
    try:
        from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv

        classes.append(Lfm2ShortConv)
    except ImportError:
        pass
    try:
        from transformers.models.lfm2_moe.modeling_lfm2_moe import Lfm2MoeShortConv

        classes.append(Lfm2MoeShortConv)
    except ImportError:
        pass
    return tuple(classes)


def tree_causal_conv1d(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, parent: torch.Tensor
) -> torch.Tensor:
    """Depthwise causal conv1d along each token's root-to-token path.

    Args:
        x: ``[1, D, N]`` (channels first, as ``Lfm2ShortConv`` holds ``B * x``).
        weight: ``[D, L]`` depthwise kernel (``conv.weight.squeeze(1)``); ``weight[:, L - 1]`` multiplies the
            token itself, as in ``nn.Conv1d`` with ``padding = L - 1``.
        bias: ``[D]`` or None.
        parent: ``LongTensor[N]``, previous token on each token's path, ``-1`` for a root's first token.

    Returns:
        ``[1, D, N]`` in ``x``'s dtype (computed in ``weight``'s dtype, as transformers' ``causal_conv1d_fn``).
    """
    n_tokens, kernel = x.shape[-1], weight.shape[-1]
    if parent.numel() != n_tokens:
        raise ValueError(f"tree conv: {parent.numel()} parent entries for a row of {n_tokens} tokens")
    hops = ancestors(parent.to(x.device), kernel)
    # Index n_tokens is an appended zero column: the zero padding of the causal conv, past the root.
    hops = torch.where(hops >= 0, hops, n_tokens)
    padded = F.pad(x.to(weight.dtype), (0, 1))
    out = weight[:, kernel - 1, None] * x.to(weight.dtype)
    for k in range(1, kernel):
        out = out + weight[:, kernel - 1 - k, None] * padded.index_select(-1, hops[k])
    if bias is not None:
        out = out + bias[:, None]
    return out.to(x.dtype)


def _tree_short_conv_forward(
    self: torch.nn.Module,
    hidden_states: torch.Tensor,
    past_key_values: Any = None,
    attention_mask: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
) -> torch.Tensor:
    """``Lfm2ShortConv.forward`` with the conv taken along the tree when the layer call carries a tree."""
    parent = getattr(self, _PARENT_ATTR, None)
    if parent is None:
        return type(self).forward(
            self, hidden_states, past_key_values=past_key_values, attention_mask=attention_mask, seq_idx=seq_idx
        )
    if past_key_values is not None:
        raise ValueError("a tree-packed row is a training forward: call the model with use_cache=False")
    if hidden_states.shape[0] != 1:
        raise ValueError(f"a packed tree row has batch size 1, got hidden states {tuple(hidden_states.shape)}")
    # Same projections and gating as transformers' forward; only the conv differs.
    bcx = self.in_proj(hidden_states).transpose(-1, -2)
    b, c, x = bcx.chunk(3, dim=-2)
    conv = tree_causal_conv1d(b * x, self.conv.weight.squeeze(1), self.conv.bias, parent)
    y = (c * conv).transpose(-1, -2).contiguous()
    return self.out_proj(y)


def _hand_tree_to_conv(layer: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
    """Decoder-layer pre-hook: give this call's ``tree_parent_index`` to the layer's conv (or clear it)."""
    parent = kwargs.get(TREE_PARENT_KWARG)
    if parent is None and kwargs.get("tree_kv_index") is not None:
        raise ValueError(
            f"a tree-packed forward of a short-conv model needs {TREE_PARENT_KWARG}=...; build the model kwargs "
            "with harness_rl.train.tree_attention.tree_kwargs(packed)"
        )
    setattr(layer.conv, _PARENT_ATTR, parent)


def _clear_tree(layer: torch.nn.Module, args: tuple, kwargs: dict[str, Any], output: Any) -> None:
    setattr(layer.conv, _PARENT_ATTR, None)


def conv_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Modules (decoder layers) whose ``conv`` child is a known short convolution."""
    classes = short_conv_classes()
    if not classes:
        return []
    return [m for m in model.modules() if isinstance(getattr(m, "conv", None), classes)]


def enable_tree_conv(model: torch.nn.Module) -> int:
    """Make every short-conv layer of ``model`` follow the tree of a packed row (idempotent).

    Returns:
        The number of conv layers switched (0 for attention-only models).
    """
    layers = conv_layers(model)
    for layer in layers:
        if getattr(layer, _HOOKED_ATTR, None) is not None:
            continue
        layer.conv.forward = types.MethodType(_tree_short_conv_forward, layer.conv)
        setattr(layer.conv, _PARENT_ATTR, None)
        handles = (
            layer.register_forward_pre_hook(_hand_tree_to_conv, with_kwargs=True),
            layer.register_forward_hook(_clear_tree, with_kwargs=True, always_call=True),
        )
        setattr(layer, _HOOKED_ATTR, handles)
    return len(layers)


def tree_conv_enabled(model: torch.nn.Module) -> bool:
    """Whether every short-conv layer of ``model`` follows the tree (True for attention-only models)."""
    return all(getattr(layer, _HOOKED_ATTR, None) is not None for layer in conv_layers(model))
