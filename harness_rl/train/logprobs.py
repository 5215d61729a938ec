"""Per-token log-probabilities of trained targets: packed tree rows, padded batches, one plain sequence.

All three return the log-probs of the same targets in the same order as ``TreeRow.pack()``'s loss terms
(sample by sample, position by position, only positions ``p >= 1`` with ``completion_mask[p] == 1``), so the
loss code does not care which path produced them. Logits are only computed at the rows that predict a trained
token (``logits_to_keep``), and turned into float32 before the softmax: a bf16 log-softmax over a 49k vocabulary
is off by ~1e-2, which is the size of the importance ratios being estimated.

``temperature`` divides the logits first; pass the sampling temperature when the recorded log-probs are those
of the tempered distribution (vLLM's ``logprobs_mode="processed_logprobs"``), 1.0 for raw ones.
"""

from __future__ import annotations

from typing import Any

import torch

from harness_rl.train.hybrid_conv import tree_conv_enabled
from harness_rl.train.tree_attention import TREE_ATTENTION, tree_kwargs, unwrap_peft, uses_tree_attention


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log_softmax(logits / temperature)[targets]`` row by row, in float32, without a second ``[M, V]`` copy."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def packed_token_logprobs(
    model: torch.nn.Module, packed: dict[str, torch.Tensor], *, temperature: float = 1.0, **forward_kwargs: Any
) -> torch.Tensor:
    """Log-prob of every trained target of one tree-packed row, for attention-only and hybrid (LFM2) models alike.

    The tree travels with this one forward call as model kwargs (:func:`~harness_rl.train.tree_attention.
    tree_kwargs`), also to the short convolutions of hybrid models, so the caller holds no context: backward,
    with or without gradient checkpointing (reentrant or not), may run any time later.

    Args:
        model: A causal LM (PEFT-wrapped or not) already switched to tree attention
            (:func:`harness_rl.train.tree_attention.enable_tree_attention`, once, before training).
        packed: Output of ``TreeRow.pack()``.
        temperature: Divides the logits (see the module docstring).
        **forward_kwargs: Extra model keyword arguments (e.g. ``tree_attention_mode="flex"``).

    Returns:
        ``FloatTensor[M]`` aligned with ``packed["token_index"]`` / ``packed["old_log_probs"]``; differentiable.
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
    return target_logprobs(outputs.logits[0], targets, temperature)[inverse]


def padded_token_logprobs(
    model: torch.nn.Module, padded: dict[str, torch.Tensor], *, temperature: float = 1.0
) -> torch.Tensor:
    """Log-prob of every trained target of a right-padded batch (:func:`harness_rl.train.packing.pad_samples`).

    The path for models that cannot be tree-packed (:func:`harness_rl.train.tree_attention.tree_packing_supported`
    is False) or when packing is turned off. Right padding keeps every real token's causal context free of pads, so
    it is also correct for a model left in tree-attention mode (its short convolutions run transformers' own path).

    Returns:
        ``FloatTensor[M]`` in the same order as ``padded["old_log_probs"]``; differentiable.
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
    return target_logprobs(logits, padded["targets"].to(device), temperature)


def sequence_token_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, loss_mask: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """Reference: log-probs of one unpacked sequence at the positions ``p >= 1`` where ``loss_mask[p]`` is 1."""
    device = _device(model)
    input_ids = input_ids.to(device)
    trained = torch.nonzero(loss_mask.to(device)[1:].bool()).squeeze(-1) + 1
    outputs = model(input_ids=input_ids[None], logits_to_keep=trained - 1, use_cache=False)
    return target_logprobs(outputs.logits[0], input_ids[trained], temperature)
