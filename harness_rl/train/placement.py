"""Where a trainer runs and in which precision: device, base-weight dtype, adapter dtype, gradient checkpointing.

The study trains on GPUs with the base weights in bf16 (half the memory of fp32, and the dtype the engine serves)
and the LoRA parameters in fp32: AdamW updates of ``lr * grad`` around 1e-5 vanish below bf16's 8-bit mantissa,
so bf16 LoRA weights would silently stop moving. Activations are recomputed in backward (gradient checkpointing),
so a micro-batch's memory is its layer inputs, not every intermediate of every layer. The CPU default keeps
everything in fp32 (``trainer.train_dtype``) without checkpointing; a test turns on the GPU settings on the CPU so
the same code path is exercised without a GPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CUDA_BASE_DTYPE = torch.bfloat16
"""Base-weight dtype on CUDA, whatever ``trainer.train_dtype`` says (that key sets the CPU dtype)."""
ADAPTER_DTYPE = torch.float32


@dataclass(frozen=True)
class TrainerPlacement:
    """A trainer's resolved device and precision.

    Attributes:
        device: Where the base model, adapter and optimizer state live.
        base_dtype: dtype of the frozen base weights.
        adapter_dtype: dtype of the trainable LoRA parameters (and so of the optimizer state).
        gradient_checkpointing: Whether activations are recomputed in backward.
    """

    device: torch.device
    base_dtype: torch.dtype
    adapter_dtype: torch.dtype
    gradient_checkpointing: bool

    def describe(self) -> str:
        """One line for the log: ``cuda:1 base=bfloat16 lora=float32 checkpointing=on``."""
        return (
            f"{self.device} base={_dtype_name(self.base_dtype)} lora={_dtype_name(self.adapter_dtype)} "
            f"checkpointing={'on' if self.gradient_checkpointing else 'off'}"
        )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def resolve_device(spec: str | torch.device | None) -> torch.device:
    """``auto`` (or None) -> ``cuda`` when a CUDA device is present, else ``cpu``; ``cpu``, ``cuda``, ``cuda:N``.

    Raises:
        ValueError: An unknown spec, or a CUDA device that this machine does not have.
    """
    text = "auto" if spec is None else str(spec)
    if text == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(text)
    except RuntimeError as exc:
        raise ValueError(f"trainer.device={text!r} is not a device; use auto, cpu, cuda or cuda:N") from exc
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise ValueError(f"trainer.device={text!r}: only auto, cpu, cuda and cuda:N are supported")
    if not torch.cuda.is_available():
        raise ValueError(f"trainer.device={text!r} but torch sees no CUDA device; use trainer.device=cpu (or auto)")
    index = torch.cuda.current_device() if device.index is None else device.index
    if index >= torch.cuda.device_count():
        raise ValueError(
            f"trainer.device={text!r} but this machine has {torch.cuda.device_count()} CUDA device(s) "
            f"(cuda:0..cuda:{torch.cuda.device_count() - 1})"
        )
    return torch.device("cuda", index)


def _flag(value: Any, key: str) -> bool | None:
    """``auto``/None -> None; booleans (or their YAML spellings) -> bool."""
    if value is None or value == "auto":
        return None
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "on", "1"):
        return True
    if str(value).lower() in ("false", "off", "0"):
        return False
    raise ValueError(f"trainer.{key}={value!r}: use auto, true or false")


def resolve_placement(trainer_cfg: Any, device: str | torch.device | None = None) -> TrainerPlacement:
    """The placement of one trainer from the ``trainer`` config group.

    Args:
        trainer_cfg: Reads ``device`` (auto | cpu | cuda | cuda:N; default auto), ``train_dtype`` (the CPU
            base dtype; default float32), ``gradient_checkpointing`` (auto | true | false; auto = on for CUDA).
        device: Overrides ``trainer.device``: the launcher passes each trainer the device its placement gives it.
    """
    resolved = resolve_device(device if device is not None else trainer_cfg.get("device", "auto"))
    if resolved.type == "cuda":
        base_dtype = CUDA_BASE_DTYPE
    else:
        name = trainer_cfg.get("train_dtype", "float32") or "float32"
        name = "float32" if name == "auto" else str(name)
        if name not in DTYPES:
            raise ValueError(f"trainer.train_dtype={name!r}: use one of {sorted(DTYPES)} (or auto)")
        base_dtype = DTYPES[name]
    checkpointing = _flag(trainer_cfg.get("gradient_checkpointing", "auto"), "gradient_checkpointing")
    return TrainerPlacement(
        device=resolved,
        base_dtype=base_dtype,
        adapter_dtype=ADAPTER_DTYPE,
        gradient_checkpointing=resolved.type == "cuda" if checkpointing is None else checkpointing,
    )


def place_model(model: torch.nn.Module, placement: TrainerPlacement) -> None:
    """Apply the placement to a PEFT-wrapped model in place: fp32 adapter parameters, gradient checkpointing.

    PEFT already upcasts adapters of a bf16 base (``autocast_adapter_dtype``); casting here as well makes the
    rule hold for any PEFT version and any base dtype. Gradient checkpointing uses the non-reentrant
    implementation, which tolerates inputs without ``requires_grad`` and keyword arguments (the tree-attention
    tensors); ``enable_input_require_grads`` is what the reentrant one needs with a frozen embedding, kept so
    either implementation gets a gradient path into the first checkpointed layer.
    """
    for parameter in model.parameters():
        if parameter.requires_grad and parameter.dtype != placement.adapter_dtype:
            parameter.data = parameter.data.to(placement.adapter_dtype)
    if placement.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
