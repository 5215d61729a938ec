"""Fused tree attention with PyTorch flex attention: a block-sparse kernel whose mask comes from ``O(N)`` numbers.

In DFS pre-order key ``j`` is on query ``i``'s path iff ``j <= i < subtree_end[j]``
(:mod:`harness_rl.train.tree_index`); a sliding window adds ``depth[i] - depth[j] < window``. Flex attention
evaluates that predicate inside a fused kernel (``mask_mod``), and skips every ``BLOCK x BLOCK`` tile that the
:class:`~torch.nn.attention.flex_attention.BlockMask` marks empty, so the work follows the tree, not ``N * N``.

The block mask is built here from the same ``O(N)`` tensors instead of by ``create_block_mask``, which evaluates
the predicate on every ``(i, j)`` pair: tile ``(qb, kb)`` is *partial* when some key ``j`` of ``kb`` has its
interval ``[j, subtree_end[j])`` meet ``qb``'s rows, and *full* (no mask evaluated) when every key's interval
covers all of ``qb``. That is one ``[N / BLOCK, N]`` comparison. Windows only ever demote tiles to partial, so
the block mask is a superset of the true mask and ``mask_mod`` decides inside partial tiles.

Flex attention is fused only under ``torch.compile`` (done once, lazily, for CUDA). Without it PyTorch runs a
reference implementation that materialises the scores; that is what runs on CPU (forward only: this PyTorch has
no flex backward on CPU), where it serves to test this module against the portable paths.
"""

from __future__ import annotations

import functools
import math
import warnings
import weakref
from collections.abc import Callable

import torch

FLEX_BLOCK_SIZE = 128
"""Tile size of the block mask (flex attention's default)."""


@functools.cache
def flex_attention_importable() -> bool:
    """Whether this PyTorch has ``torch.nn.attention.flex_attention``."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def flex_attention_available(device: torch.device) -> bool:
    """Whether the fused flex path can run (forward and backward) on ``device``: CUDA with flex attention."""
    return device.type == "cuda" and flex_attention_importable()


@functools.cache
def _compiled_flex_attention() -> Callable:
    from torch.nn.attention.flex_attention import flex_attention

    # Packed rows change length every call: let dynamo mark the length dynamic rather than recompile per row.
    return torch.compile(flex_attention, dynamic=None)


def tree_block_mask(
    subtree_end: torch.Tensor, depth: torch.Tensor, sliding_window: int | None = None, block_size: int = FLEX_BLOCK_SIZE
):
    """The flex :class:`BlockMask` of a packed row's ancestor mask (optionally windowed by depth).

    Args:
        subtree_end: ``LongTensor[N]``, one past the last packed position of each token's subtree.
        depth: ``LongTensor[N]``, each token's index along its path.
        sliding_window: If set, a token only sees ancestors less than this many levels above it.
        block_size: Tile size.
    """
    from torch.nn.attention.flex_attention import BlockMask

    device = subtree_end.device
    n = subtree_end.numel()
    n_blocks = math.ceil(n / block_size)
    padded = n_blocks * block_size
    # Pad keys so that they are never visible (subtree_end 0) and queries so that they see nothing new.
    end = torch.zeros(padded, dtype=torch.long, device=device)
    end[:n] = subtree_end
    dep = torch.zeros(padded, dtype=torch.long, device=device)
    dep[:n] = depth
    keys = torch.arange(padded, device=device)
    q_first = torch.arange(n_blocks, device=device) * block_size
    q_last = (q_first + block_size - 1).clamp(max=n - 1)
    # [n_blocks, padded]: key j can be visible to some row of query block qb / to all of its rows.
    some = (keys[None, :] <= q_last[:, None]) & (end[None, :] > q_first[:, None])
    every = (keys[None, :] <= q_first[:, None]) & (end[None, :] > q_last[:, None])
    if sliding_window:
        q_depth = dep.view(n_blocks, block_size)
        valid = (torch.arange(padded, device=device) < n).view(n_blocks, block_size)
        min_depth = q_depth.masked_fill(~valid, torch.iinfo(torch.long).max).amin(-1)
        max_depth = q_depth.masked_fill(~valid, -1).amax(-1)
        some &= (min_depth[:, None] - dep[None, :]) < sliding_window
        every &= (max_depth[:, None] - dep[None, :]) < sliding_window
    any_tile = some.view(n_blocks, n_blocks, block_size).any(-1)
    # A tile holding a padded key is never full: the padded key must stay masked.
    full_tile = every.view(n_blocks, n_blocks, block_size).all(-1)
    partial_tile = any_tile & ~full_tile

    def layout(tiles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        counts = tiles.sum(-1, dtype=torch.int32)
        order = torch.argsort(tiles.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)
        return counts[None, None], order[None, None]

    def mask_mod(b, h, q_idx, kv_idx):
        visible = (kv_idx <= q_idx) & (q_idx < end[kv_idx])
        if sliding_window:
            visible = visible & (dep[q_idx] - dep[kv_idx] < sliding_window)
        return visible

    kv_num, kv_indices = layout(partial_tile)
    full_num, full_indices = layout(full_tile)
    return BlockMask.from_kv_blocks(
        kv_num, kv_indices, full_num, full_indices, BLOCK_SIZE=block_size, mask_mod=mask_mod, seq_lengths=(n, n)
    )


class _BlockMaskCache:
    """The block mask of the row being forwarded, shared by all layers (and a checkpointing recompute).

    Keyed by the identity of the row's ``tree_subtree_end`` tensor (the same object reaches every layer through
    the model kwargs) and the window, so a new row never reuses an old mask.
    """

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._masks: dict[int | None, object] = {}

    def get(self, subtree_end: torch.Tensor, depth: torch.Tensor, sliding_window: int | None):
        ref = self._key[0]() if self._key else None
        if ref is not subtree_end:
            self._key = (weakref.ref(subtree_end),)
            self._masks = {}
        if sliding_window not in self._masks:
            self._masks[sliding_window] = tree_block_mask(subtree_end, depth, sliding_window)
        return self._masks[sliding_window]


_block_masks = _BlockMaskCache()


def flex_tree_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    subtree_end: torch.Tensor,
    depth: torch.Tensor,
    scaling: float | None,
    sliding_window: int | None,
    softcap: float | None,
) -> torch.Tensor:
    """Tree attention of one packed row with flex attention.

    Args:
        query: ``[1, H, N, D]``.
        key: ``[1, H_kv, N, D]`` (grouped-query heads are handled by the kernel).
        value: ``[1, H_kv, N, D]``.
        subtree_end: See :func:`tree_block_mask`.
        depth: See :func:`tree_block_mask`.
        scaling: Softmax scale (``D ** -0.5`` when None).
        sliding_window: Window in path positions, or None.
        softcap: Attention logit soft-capping, or None.

    Returns:
        ``[1, H, N, D]``.
    """
    from torch.nn.attention.flex_attention import flex_attention

    block_mask = _block_masks.get(subtree_end, depth, sliding_window)
    score_mod = None
    if softcap:

        def score_mod(score, b, h, q_idx, kv_idx):
            return softcap * torch.tanh(score / softcap)

    options = {
        "score_mod": score_mod,
        "block_mask": block_mask,
        "scale": scaling,
        "enable_gqa": key.shape[1] != query.shape[1],
    }
    if query.device.type == "cuda":
        return _compiled_flex_attention()(query, key, value, **options)
    with warnings.catch_warnings():
        # Off CUDA the unfused reference is what we mean to run (tests); its "use torch.compile" hint is noise.
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(query, key, value, **options)
