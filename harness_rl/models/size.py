"""How big a model is, and what its engine and its trainers need in GPU memory (the placement check's arithmetic).

The size comes from the model's ``config.json`` when it is on this machine (a local folder, an embedded model
already converted, or the Hugging Face hub cache): the model is built on PyTorch's ``meta`` device, which
allocates nothing, so parameters and LoRA targets are counted exactly for any architecture transformers knows
(hybrid LFM2 convolution layers and mixture-of-experts included) instead of by a hand-written formula per family.
Otherwise the published figures in the model's config file are used (``model.params_b`` and its shape).

The memory model is deliberately simple and says what it counts (bytes, bf16 weights on GPU):

- engine: the bf16 weights, split over its tensor-parallel GPUs, inside ``gpu_memory_utilization`` of each,
  with at least ``MIN_KV_CACHE_GIB`` left for the KV cache;
- trainer, resident: bf16 base weights + fp32 LoRA parameters, gradients and two Adam moments (16 bytes per
  LoRA parameter);
- trainer, while it trains one micro-batch of ``token_budget`` tokens with gradient checkpointing: every layer's
  bf16 input kept for the recompute, one layer's intermediates (attention projections and the MLP), and the
  logits at the trained positions (bf16 logits, their fp32 copy and its gradient: 10 bytes per vocabulary entry).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GIB = 1 << 30
BF16_BYTES = 2
#: fp32 LoRA parameter, its gradient and Adam's two moments.
LORA_BYTES_PER_PARAM = 4 + 4 + 8
#: Per vocabulary entry at a trained position: bf16 logits, the fp32 copy the log-softmax runs on, its gradient.
LOGIT_BYTES = 2 + 4 + 4
#: The engine must keep at least this much of its share for the KV cache, or it cannot hold one long rollout.
MIN_KV_CACHE_GIB = 4.0


@dataclass(frozen=True)
class ModelSize:
    """What the memory arithmetic needs to know about a model.

    Attributes:
        params: Total parameters (every expert of a mixture-of-experts model: all are resident).
        lora_in_out: Sum of ``in_features + out_features`` over the linear layers LoRA ``all-linear`` targets;
            a rank-r adapter has ``r * lora_in_out`` parameters.
        hidden_size: Width of the residual stream.
        num_layers: Decoder layers.
        vocab_size: Output vocabulary.
        ffn_size: Widest MLP intermediate a token passes through (experts: per-expert width x experts per token).
        source: Where the numbers came from, for messages ("config.json at ...", "model.params_b").
    """

    params: int
    lora_in_out: int
    hidden_size: int
    num_layers: int
    vocab_size: int
    ffn_size: int
    source: str

    def weight_bytes(self) -> int:
        """bf16 weights."""
        return self.params * BF16_BYTES

    def lora_params(self, rank: int) -> int:
        return rank * self.lora_in_out

    def trainer_resident_bytes(self, lora_rank: int) -> int:
        """What a trainer keeps on its GPU between steps: bf16 base weights plus the LoRA training state."""
        return self.weight_bytes() + self.lora_params(lora_rank) * LORA_BYTES_PER_PARAM

    def activation_bytes(self, tokens: int, trained_fraction: float) -> int:
        """Peak activation memory of one forward+backward over a micro-batch of ``tokens`` (see module docstring)."""
        checkpoints = tokens * self.hidden_size * self.num_layers * BF16_BYTES
        one_layer = tokens * (6 * self.hidden_size + 3 * self.ffn_size) * BF16_BYTES
        logits = int(tokens * trained_fraction) * self.vocab_size * LOGIT_BYTES
        return checkpoints + one_layer + logits


def find_config_json(path: str) -> Path | None:
    """The model's ``config.json`` if it is on this machine (local folder, converted embedded model, hub cache)."""
    from harness_rl.models.fetch import default_cache_dir
    from harness_rl.models.registry import EMBEDDED_MODELS

    candidates = [default_cache_dir() / path] if path in EMBEDDED_MODELS else [Path(path).expanduser()]
    for folder in candidates:
        if (folder / "config.json").is_file():
            return folder / "config.json"
    if "/" in path and not path.startswith(("/", ".", "~")):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
        if isinstance(cached, str):
            return Path(cached)
    return None


def size_from_config(config_json: Path) -> ModelSize:
    """Count a model's parameters and LoRA targets exactly by building it on the ``meta`` device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(config_json.parent))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    output = model.get_output_embeddings()
    # PEFT's all-linear targets every nn.Linear except the output layer.
    lora_in_out = sum(
        m.in_features + m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not output
    )
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    raw: dict[str, Any] = json.loads(config_json.read_text())
    per_token_experts = (raw.get("moe_intermediate_size") or 0) * (raw.get("num_experts_per_tok") or 0)
    ffn = max(int(getattr(text, "intermediate_size", 0) or 0), per_token_experts) or 4 * text.hidden_size
    return ModelSize(
        params=params,
        lora_in_out=lora_in_out,
        hidden_size=int(text.hidden_size),
        num_layers=int(text.num_hidden_layers),
        vocab_size=int(text.vocab_size),
        ffn_size=int(ffn),
        source=f"config.json at {config_json.parent}",
    )


def size_from_published(params_b: float, hidden_size: int, num_layers: int, vocab_size: int) -> ModelSize:
    """A model's size from its published figures, for when its ``config.json`` is not on this machine.

    The LoRA target width is that of a Llama-style layer (q, k, v, o, gate, up, down: about 20 x hidden per
    layer); LoRA state is a few hundred MiB either way, so the approximation does not decide a fit.
    """
    return ModelSize(
        params=int(params_b * 1e9),
        lora_in_out=20 * hidden_size * num_layers,
        hidden_size=hidden_size,
        num_layers=num_layers,
        vocab_size=vocab_size,
        ffn_size=4 * hidden_size,
        source="the published figures in the model's config (model.params_b, hidden_size, num_layers, vocab_size)",
    )


def model_size(model_cfg: Any) -> ModelSize | None:
    """The size of the model a config's ``model`` section names; None when neither source is available.

    ``config.json`` wins when it is on this machine; a config that cannot be built on the meta device (custom
    code) falls back to the published figures.
    """
    config_json = find_config_json(str(model_cfg.path))
    if config_json is not None:
        try:
            return size_from_config(config_json)
        except (ValueError, KeyError, OSError) as err:
            log.warning("cannot build %s on the meta device (%s); using the published size", config_json, err)
    published = [model_cfg.get(key) for key in ("params_b", "hidden_size", "num_layers", "vocab_size")]
    if any(value is None for value in published):
        return None
    return size_from_published(float(published[0]), *(int(v) for v in published[1:]))
