"""Rollout graph of one session: model calls as nodes, linked by token-prefix containment.

A harness rebuilds its whole conversation for every model call, so call k+1's prompt normally starts with
call k's prompt followed by call k's completion. The parent of a call is the earlier call whose
prompt+completion is the longest token prefix of its prompt. Retries show up as siblings (same parent),
sub-agents and context compaction as new roots. Every root-to-leaf path is one training sequence.

Linking is near-linear: each node's prompt+completion is indexed by (length, polynomial prefix hash), and
a new prompt's prefix hashes for every length come from one vectorized pass, so finding the parent is a
dictionary lookup per distinct indexed length plus one exact comparison to rule out hash collisions.

Token ids and log-probs are kept as typed arrays (4 and 8 bytes an entry) rather than Python lists (about 36
bytes a token id: a pointer plus an int object): a finished 20-turn agent session held 2.4 MB as lists.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# An odd 64-bit multiplier; arithmetic wraps modulo 2**64 in numpy's uint64, which is the hash's modulus.
_HASH_BASE = np.uint64(0x9E3779B97F4A7C15)


class _PrefixHasher:
    """Polynomial prefix hashes H(L) = sum_{i<L} (t_i + 1) * B**i mod 2**64, for all L at once."""

    def __init__(self) -> None:
        self._powers = np.ones(1, dtype=np.uint64)

    def _ensure_powers(self, n: int) -> None:
        if len(self._powers) >= n:
            return
        size = max(n, 2 * len(self._powers))
        powers = np.full(size, _HASH_BASE, dtype=np.uint64)
        powers[0] = 1
        with np.errstate(over="ignore"):
            self._powers = np.cumprod(powers, dtype=np.uint64)

    def prefix_hashes(self, ids: np.ndarray) -> np.ndarray:
        """Returns h with h[L-1] = H(L) for L in 1..len(ids)."""
        self._ensure_powers(len(ids))
        with np.errstate(over="ignore"):
            terms = (ids.astype(np.uint64) + np.uint64(1)) * self._powers[: len(ids)]
            return np.cumsum(terms, dtype=np.uint64)


@dataclass
class Node:
    """One model call as recorded by the proxy (field names are the trace JSON's; token ids are int32 arrays
    and log-probs float64 arrays, lists in `to_json`)."""

    id: int
    parent: int | None
    prompt_token_ids: array
    completion_token_ids: array
    completion_logprobs: array
    finish_reason: str | None
    tool_calls: list[dict[str, Any]]
    dialect: str
    model: str
    t_start: float
    t_end: float
    usage: dict[str, Any] = field(default_factory=dict)
    budget_exhausted: bool = False
    dropped_params: list[str] = field(default_factory=list)
    #: Tool calls the safety gate defused before the harness saw them (call id, tool, rule, explanation); the
    #: sampled tokens above are unchanged.
    blocked: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "parent": self.parent,
            "prompt_token_ids": self.prompt_token_ids.tolist(),
            "completion_token_ids": self.completion_token_ids.tolist(),
            "completion_logprobs": self.completion_logprobs.tolist(),
            "finish_reason": self.finish_reason,
            "tool_calls": self.tool_calls,
            "dialect": self.dialect,
            "model": self.model,
            "t_start": self.t_start,
            "t_end": self.t_end,
            "usage": self.usage,
            "budget_exhausted": self.budget_exhausted,
            "dropped_params": self.dropped_params,
            "blocked": self.blocked,
        }


class RolloutGraph:
    """Append-only graph of a session's model calls; thread-safe.

    Nodes are added when a call completes, so a parent (whose completion the child's prompt contains)
    is always added before its child.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: list[Node] = []
        self._index: dict[tuple[int, int], list[int]] = {}  # (length, hash) -> node ids, oldest first
        self._lengths: list[int] = []  # sorted distinct indexed lengths
        self._hasher = _PrefixHasher()

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def nodes(self) -> list[Node]:
        with self._lock:
            return list(self._nodes)

    def add(
        self,
        *,
        prompt_token_ids: Sequence[int],
        completion_token_ids: Sequence[int],
        completion_logprobs: Sequence[float],
        finish_reason: str | None,
        tool_calls: list[dict[str, Any]] | None = None,
        dialect: str,
        model: str,
        t_start: float,
        t_end: float,
        usage: dict[str, Any] | None = None,
        budget_exhausted: bool = False,
        dropped_params: list[str] | None = None,
        blocked: list[dict[str, Any]] | None = None,
    ) -> Node:
        """Records one call, links it to its parent and indexes it; returns the node.

        Raises:
            ValueError: if completion ids and log-probs differ in length (they must align one to one), or a
                token id is not an integer in int32 range.
        """
        if len(completion_token_ids) != len(completion_logprobs):
            raise ValueError(
                f"{len(completion_token_ids)} completion token ids but {len(completion_logprobs)} log-probs"
            )
        prompt, completion = token_array(prompt_token_ids), token_array(completion_token_ids)
        logprobs = array("d", completion_logprobs)
        with self._lock:
            node = Node(
                id=len(self._nodes),
                parent=None,
                prompt_token_ids=prompt,
                completion_token_ids=completion,
                completion_logprobs=logprobs,
                finish_reason=finish_reason,
                tool_calls=list(tool_calls or []),
                dialect=dialect,
                model=model,
                t_start=t_start,
                t_end=t_end,
                usage=dict(usage or {}),
                budget_exhausted=budget_exhausted,
                dropped_params=list(dropped_params or []),
                blocked=list(blocked or []),
            )
            # Budget answers never reached the engine: no tokens to link or train on.
            if not budget_exhausted:
                full = np.frombuffer(prompt + completion, dtype=np.int32)
                # One pass hashes every prefix of prompt+completion: the prompt's prefixes find the parent,
                # the whole sequence's hash indexes this node.
                hashes = self._hasher.prefix_hashes(full) if len(full) else full
                node.parent = self._find_parent(full[: len(prompt)], hashes)
                self._index_node(node, hashes)
            self._nodes.append(node)
            return node

    def _find_parent(self, prompt: np.ndarray, hashes: np.ndarray) -> int | None:
        if len(prompt) == 0 or not self._lengths:
            return None
        # Longest indexed length first; the first verified match is the longest prefix.
        for length in reversed(self._lengths[: bisect.bisect_right(self._lengths, len(prompt))]):
            for node_id in reversed(self._index.get((length, int(hashes[length - 1])), ())):
                if self._is_prefix(self._nodes[node_id], prompt[:length]):
                    return node_id
        return None

    @staticmethod
    def _is_prefix(node: Node, ids: np.ndarray) -> bool:
        """Whether node's prompt+completion equals `ids` (same length), compared part by part."""
        n_prompt = len(node.prompt_token_ids)
        return np.array_equal(np.frombuffer(node.prompt_token_ids, dtype=np.int32), ids[:n_prompt]) and (
            np.array_equal(np.frombuffer(node.completion_token_ids, dtype=np.int32), ids[n_prompt:])
        )

    def _index_node(self, node: Node, hashes: np.ndarray) -> None:
        length = len(hashes)
        if length == 0:
            return
        self._index.setdefault((length, int(hashes[-1])), []).append(node.id)
        pos = bisect.bisect_left(self._lengths, length)
        if pos == len(self._lengths) or self._lengths[pos] != length:
            self._lengths.insert(pos, length)

    def sequences(self) -> list[dict[str, Any]]:
        """Root-to-leaf training sequences over the engine-answered nodes.

        Returns:
            One dict per leaf: node_ids (root first), input_ids (= leaf prompt + leaf completion),
            loss_mask (1 exactly at tokens sampled by a node on the path) and logprobs (the sampled
            log-probs at those positions, 0.0 elsewhere).
        """
        with self._lock:
            nodes = [n for n in self._nodes if not n.budget_exhausted]
        has_child = {n.parent for n in nodes if n.parent is not None}
        by_id = {n.id: n for n in nodes}
        out = []
        for leaf in nodes:
            if leaf.id in has_child:
                continue
            path = [leaf]
            while path[-1].parent is not None:
                path.append(by_id[path[-1].parent])
            path.reverse()
            input_ids = leaf.prompt_token_ids + leaf.completion_token_ids
            loss_mask = np.zeros(len(input_ids), dtype=np.int8)
            logprobs = np.zeros(len(input_ids), dtype=np.float64)
            for node in path:
                start, n = len(node.prompt_token_ids), len(node.completion_logprobs)
                loss_mask[start : start + n] = 1
                logprobs[start : start + n] = np.frombuffer(node.completion_logprobs, dtype=np.float64)
            out.append(
                {
                    "node_ids": [n.id for n in path],
                    "input_ids": input_ids.tolist(),
                    "loss_mask": loss_mask.tolist(),
                    "logprobs": logprobs.tolist(),
                }
            )
        return out


def token_array(ids: Sequence[int]) -> array:
    """Token ids as an int32 array (a copy).

    Raises:
        ValueError: if an id is not an integer in int32 range (no tokenizer has 2**31 tokens).
    """
    try:
        return array("i", ids)
    except (TypeError, OverflowError) as exc:
        raise ValueError(f"token ids must be integers in int32 range: {exc}") from exc
