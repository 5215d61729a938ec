"""Per-token structure of a prefix-tree packed row, derived once per forward from ``TreeRow.pack()``'s tensors.

``pack()`` describes the tree by its segments (``tree_cu_seqlens_q``) and each segment's root-to-segment path
(``tree_kv_index`` / ``tree_cu_seqlens_k``). Layers that are not one attention call over those paths need the
same tree per token instead:

- ``parent``: the previous token on the token's own path (``-1`` for a root's first token). A short convolution
  (LFM2's ``conv`` layers) reads its window by walking it, so a branch never sees the tail of the sibling that
  precedes it in packed order.
- ``depth``: the token's index along its path (its position in every sample through it); sliding windows count
  in it.
- ``subtree_end``: one past the last packed position of the token's subtree. In DFS pre-order a token ``j`` is
  an ancestor-or-self of ``i`` iff ``j <= i < subtree_end[j]``, which is the whole ancestor mask in ``O(N)``
  numbers (the fused flex-attention path builds its block mask from it).

:func:`tree_ancestor_mask` spells the same relation out as a dense ``[N, N]`` mask (the ``dense`` attention
path and tests). All are computed with vectorised scatters over ``tree_kv_index`` (no Python loop over tokens), on the
device the tensors are on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TreeIndex:
    """Per-token tree structure of one packed row (all ``LongTensor[N]``, on the row's device)."""

    parent: torch.Tensor
    depth: torch.Tensor
    subtree_end: torch.Tensor


def tree_index(
    tree_kv_index: torch.Tensor, tree_cu_seqlens_q: torch.Tensor, tree_cu_seqlens_k: torch.Tensor
) -> TreeIndex:
    """Parent, depth and subtree end of every packed token.

    Args:
        tree_kv_index: Packed positions of every segment's root-to-segment path, laid end to end (``K``).
        tree_cu_seqlens_q: Segment boundaries in the row (``S + 1``).
        tree_cu_seqlens_k: Path boundaries in ``tree_kv_index`` (``S + 1``).
    """
    device = tree_kv_index.device
    kv = tree_kv_index.long()
    cu_q = tree_cu_seqlens_q.to(device=device, dtype=torch.long)
    cu_k = tree_cu_seqlens_k.to(device=device, dtype=torch.long)
    n_tokens, n_segments = int(cu_q[-1]), cu_q.numel() - 1
    path_segment = torch.repeat_interleave(torch.arange(n_segments, device=device), cu_k.diff())
    offset_in_path = torch.arange(kv.numel(), device=device) - cu_k[path_segment]
    # A token sits at the same depth, behind the same parent, on every path through it, so the duplicate writes
    # of the scatters below all carry the same value.
    depth = torch.empty(n_tokens, dtype=torch.long, device=device)
    depth[kv] = offset_in_path
    parent = torch.full((n_tokens,), -1, dtype=torch.long, device=device)
    inner = torch.nonzero(offset_in_path > 0).squeeze(-1)
    parent[kv[inner]] = kv[inner - 1]
    # Token j lies on exactly the paths of the segments in its subtree; the latest end among them is its own.
    subtree_end = torch.zeros(n_tokens, dtype=torch.long, device=device)
    subtree_end.scatter_reduce_(0, kv, cu_q[1:][path_segment], reduce="amax")
    return TreeIndex(parent=parent, depth=depth, subtree_end=subtree_end)


def ancestors(parent: torch.Tensor, n: int) -> torch.Tensor:
    """``LongTensor[n, N]``: row ``k`` holds every token's ``k``-th ancestor (row 0 the token itself), ``-1`` past
    the root."""
    rows = [torch.arange(parent.numel(), device=parent.device)]
    for _ in range(1, n):
        previous = rows[-1]
        rows.append(torch.where(previous >= 0, parent[previous.clamp(min=0)], previous))
    return torch.stack(rows)


def tree_ancestor_mask(
    tree_kv_index: torch.Tensor,
    tree_cu_seqlens_q: torch.Tensor,
    tree_cu_seqlens_k: torch.Tensor,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """Boolean ``[N, N]`` mask: ``mask[i, j]`` is True when packed token ``j`` is on token ``i``'s path.

    DFS pre-order puts every ancestor before its descendants, so a query in segment ``s`` sees exactly the keys
    of ``s``'s root-to-segment path that are not after it in packed order.

    Args:
        tree_kv_index: Packed positions of every segment's path, laid end to end.
        tree_cu_seqlens_q: Segment boundaries in the row (``S + 1``).
        tree_cu_seqlens_k: Path boundaries in ``tree_kv_index`` (``S + 1``).
        sliding_window: If set, a token also only sees keys less than this many positions above it.
    """
    device = tree_kv_index.device
    cu_q = tree_cu_seqlens_q.to(device=device, dtype=torch.long)
    cu_k = tree_cu_seqlens_k.to(device=device, dtype=torch.long)
    n_tokens, n_segments = int(cu_q[-1]), cu_q.numel() - 1
    path_lengths = cu_k.diff()
    entry_segment = torch.repeat_interleave(torch.arange(n_segments, device=device), path_lengths)
    on_path = torch.zeros(n_segments, n_tokens, dtype=torch.bool, device=device)
    on_path[entry_segment, tree_kv_index] = True
    query_segment = torch.repeat_interleave(torch.arange(n_segments, device=device), cu_q.diff())
    positions = torch.arange(n_tokens, device=device)
    mask = on_path[query_segment] & (positions[None, :] <= positions[:, None])
    if sliding_window:
        # A token's depth is its index along any path through it.
        depth = torch.empty(n_tokens, dtype=torch.long, device=device)
        depth[tree_kv_index] = torch.arange(tree_kv_index.numel(), device=device) - cu_k[entry_segment]
        mask &= (depth[:, None] - depth[None, :]) < sliding_window
    return mask
