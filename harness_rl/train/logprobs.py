"""Per-token log-probabilities of trained targets: packed tree rows, padded batches, one plain sequence.

All three return the log-probs of the same targets in the same order as ``TreeRow.pack()``'s loss terms
(sample by sample, position by position, only positions ``p >= 1`` with ``completion_mask[p] == 1``), so the
loss code does not care which path produced them. Logits are only computed at the rows that predict a trained
token (``logits_to_keep``), and turned into float32 before the softmax: a bf16 log-softmax over a 49k vocabulary
is off by ~1e-2, which is the size of the importance ratios being estimated.

``temperature`` divides the logits first; pass the sampling temperature when the recorded log-probs are those
of the tempered distribution (vLLM's ``logprobs_mode="processed_logprobs"``), 1.0 for raw ones.

``with_entropy=True`` also returns, from the same logits (no second forward), the full-vocabulary entropy of that
tempered distribution at each trained position: a diagnostic (collapsing entropy is the usual sign of a policy
that stopped exploring), so it is computed without gradient and in row chunks.
"""

from __future__ import annotations

from typing import Any, Literal, overload

import torch

from harness_rl.train.hybrid_conv import tree_conv_enabled
from harness_rl.train.tree_attention import TREE_ATTENTION, tree_kwargs, unwrap_peft, uses_tree_attention


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


ENTROPY_CHUNK_ELEMENTS = 1 << 26
"""Logit elements (256 MiB in float32) per chunk of the entropy's softmax: a 64k-token row over a 65k vocabulary
would otherwise need another 17 GiB ``[M, V]`` copy beside the logits."""


@overload
def target_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = ..., *, with_entropy: Literal[False] = ...
) -> torch.Tensor: ...


@overload
def target_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = ..., *, with_entropy: Literal[True]
) -> tuple[torch.Tensor, torch.Tensor]: ...


def target_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, *, with_entropy: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``log_softmax(logits / temperature)[targets]`` row by row, in float32, without a second ``[M, V]`` copy.

    With ``with_entropy``, also each row's entropy (:func:`row_entropy`), detached.
    """
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, targets[:, None]).squeeze(-1) - lse
    if not with_entropy:
        return logprobs
    return logprobs, row_entropy(logits, lse)


@torch.no_grad()
def row_entropy(logits: torch.Tensor, lse: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` per row: ``logsumexp(z) - sum(softmax(z) * z)``, float32, no gradient.

    Written out rather than ``torch.distributions.Categorical(logits=z).entropy()`` because that normalises the
    whole ``[M, V]`` logits into a new tensor at once; here the softmax exists one chunk of rows at a time
    (:data:`ENTROPY_CHUNK_ELEMENTS`), reusing the logsumexp the log-probs already computed.

    Args:
        logits: ``[M, V]`` (already divided by the temperature).
        lse: ``logsumexp(logits, -1)`` if the caller has it.
    """
    logits = logits.detach()
    lse = torch.logsumexp(logits.float(), dim=-1) if lse is None else lse.detach().float()
    rows = max(1, ENTROPY_CHUNK_ELEMENTS // max(logits.shape[-1], 1))
    out = torch.empty_like(lse)
    for start in range(0, logits.shape[0], rows):
        z = logits[start : start + rows].float()
        shift = lse[start : start + rows, None]
        p = (z - shift).exp_()
        # 0 * -inf (a masked logit) is NaN; its true contribution to sum(p * z) is 0.
        expected = p.mul_(z).nan_to_num_(nan=0.0).sum(-1)
        out[start : start + rows] = lse[start : start + rows] - expected
    return out


@overload
def packed_token_logprobs(
    model: torch.nn.Module,
    packed: dict[str, torch.Tensor],
    *,
    temperature: float = ...,
    with_entropy: Literal[False] = ...,
    **forward_kwargs: Any,
) -> torch.Tensor: ...


@overload
def packed_token_logprobs(
    model: torch.nn.Module,
    packed: dict[str, torch.Tensor],
    *,
    temperature: float = ...,
    with_entropy: Literal[True],
    **forward_kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]: ...


def packed_token_logprobs(
    model: torch.nn.Module,
    packed: dict[str, torch.Tensor],
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    **forward_kwargs: Any,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of every trained target of one tree-packed row, for attention-only and hybrid (LFM2) models alike.

    The tree travels with this one forward call as model kwargs (:func:`~harness_rl.train.tree_attention.
    tree_kwargs`), also to the short convolutions of hybrid models, so the caller holds no context: backward,
    with or without gradient checkpointing (reentrant or not), may run any time later.

    Args:
        model: A causal LM (PEFT-wrapped or not) already switched to tree attention
            (:func:`harness_rl.train.tree_attention.enable_tree_attention`, once, before training).
        packed: Output of ``TreeRow.pack()``.
        temperature: Divides the logits (see the module docstring).
        with_entropy: Also return the (detached) entropy at each trained position.
        **forward_kwargs: Extra model keyword arguments (e.g. ``tree_attention_mode="flex"``).

    Returns:
        ``FloatTensor[M]`` aligned with ``packed["token_index"]`` / ``packed["old_log_probs"]``; differentiable.
        With ``with_entropy``, ``(logprobs, entropy)``, both ``[M]``.
    """
    if not uses_tree_attention(model):
        raise RuntimeError(
            f"model attention is not {TREE_ATTENTION!r}; call enable_tree_attention(model) once before training "
            "on packed rows (switching per call would break gradient-checkpointing recomputes)"
        )
    if not tree_conv_enabled(model):
        raise RuntimeError(
            "the model's short-conv layers do not follow the tree; call enable_tree_attention(model) (it also "
            "switches the convolutions) before training on packed rows"
        )
    device = _device(model)
    token_index = packed["token_index"].to(device)
    # A shared position predicts the same label for every sample through it: score it once.
    rows, inverse = torch.unique(token_index, return_inverse=True)
    targets = packed["shift_labels"].to(device)[rows]
    outputs = model(
        input_ids=packed["input_ids"].to(device)[None],
        position_ids=packed["position_ids"].to(device)[None],
        logits_to_keep=rows,
        use_cache=False,
        **tree_kwargs(packed, device),
        **forward_kwargs,
    )
    if not with_entropy:
        return target_logprobs(outputs.logits[0], targets, temperature)[inverse]
    logprobs, entropy = target_logprobs(outputs.logits[0], targets, temperature, with_entropy=True)
    return logprobs[inverse], entropy[inverse]


@overload
def padded_token_logprobs(
    model: torch.nn.Module,
    padded: dict[str, torch.Tensor],
    *,
    temperature: float = ...,
    with_entropy: Literal[False] = ...,
) -> torch.Tensor: ...


@overload
def padded_token_logprobs(
    model: torch.nn.Module, padded: dict[str, torch.Tensor], *, temperature: float = ..., with_entropy: Literal[True]
) -> tuple[torch.Tensor, torch.Tensor]: ...


def padded_token_logprobs(
    model: torch.nn.Module, padded: dict[str, torch.Tensor], *, temperature: float = 1.0, with_entropy: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of every trained target of a right-padded batch (:func:`harness_rl.train.packing.pad_samples`).

    The path for models that cannot be tree-packed (:func:`harness_rl.train.tree_attention.tree_packing_supported`
    is False) or when packing is turned off. Right padding keeps every real token's causal context free of pads, so
    it is also correct for a model left in tree-attention mode (its short convolutions run transformers' own path).

    Returns:
        ``FloatTensor[M]`` in the same order as ``padded["old_log_probs"]``; differentiable. With ``with_entropy``,
        ``(logprobs, entropy)`` as in :func:`packed_token_logprobs`.
    """
    device = _device(model)
    batch_index = padded["batch_index"].to(device)
    position = padded["token_index"].to(device)
    base = unwrap_peft(model)
    # The causal-LM forward can only keep whole columns of the batch; run the decoder and apply the head to the
    # exact (row, column) pairs instead, so the [M, V] logits are no bigger than in the packed path.
    hidden = base.get_decoder()(
        input_ids=padded["input_ids"].to(device),
        attention_mask=padded["attention_mask"].to(device),
        use_cache=False,
    ).last_hidden_state
    logits = base.get_output_embeddings()(hidden[batch_index, position])
    softcap = getattr(base.config.get_text_config(), "final_logit_softcapping", None)
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    return target_logprobs(logits, padded["targets"].to(device), temperature, with_entropy=with_entropy)


def sequence_token_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, loss_mask: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """Reference: log-probs of one unpacked sequence at the positions ``p >= 1`` where ``loss_mask[p]`` is 1."""
    device = _device(model)
    input_ids = input_ids.to(device)
    trained = torch.nonzero(loss_mask.to(device)[1:].bool()).squeeze(-1) + 1
    outputs = model(input_ids=input_ids[None], logits_to_keep=trained - 1, use_cache=False)
    return target_logprobs(outputs.logits[0], input_ids[trained], temperature)
