"""A trainer's device and precision: auto picks CUDA when present; on CUDA the base is bf16, LoRA fp32 and
checkpointing on; the CPU default is fp32 without checkpointing; a device this machine lacks fails naming the key."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from harness_rl.train.placement import resolve_device, resolve_placement


def cfg(**over):
    return OmegaConf.create({"train_dtype": "float32", **over})


@pytest.fixture
def two_gpus(monkeypatch):
    """Pretend this machine has two CUDA devices (resolution only; nothing is allocated)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_cpu_default_is_fp32_without_checkpointing(no_gpu) -> None:
    placement = resolve_placement(cfg())  # no trainer.device key at all: auto
    assert placement.describe() == "cpu base=float32 lora=float32 checkpointing=off"
    assert resolve_placement(cfg(device="auto", gradient_checkpointing="true")).gradient_checkpointing


def test_cuda_is_bf16_base_fp32_lora_with_checkpointing(two_gpus) -> None:
    assert resolve_placement(cfg(device="auto")).describe() == "cuda:0 base=bfloat16 lora=float32 checkpointing=on"
    assert resolve_placement(cfg(device="cuda:1")).device == torch.device("cuda", 1)
    # The launcher's per-trainer device wins over the config; checkpointing can be turned off explicitly.
    placement = resolve_placement(cfg(device="cpu", gradient_checkpointing=False), device="cuda:1")
    assert placement.device == torch.device("cuda", 1) and not placement.gradient_checkpointing
    assert resolve_placement(cfg(device="cpu"), device="cpu").base_dtype == torch.float32


def test_cpu_dtype_comes_from_train_dtype(no_gpu) -> None:
    assert resolve_placement(cfg(train_dtype="bfloat16")).base_dtype == torch.bfloat16
    assert resolve_placement(cfg(train_dtype="auto")).base_dtype == torch.float32
    with pytest.raises(ValueError, match="trainer.train_dtype"):
        resolve_placement(cfg(train_dtype="int8"))


def test_unavailable_or_unknown_devices_fail_naming_the_key(no_gpu, monkeypatch) -> None:
    with pytest.raises(ValueError, match="trainer.device='cuda'.*no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="trainer.device='gpu'"):
        resolve_device("gpu")
    with pytest.raises(ValueError, match="trainer.device='mps'"):
        resolve_device("mps")
    with pytest.raises(ValueError, match="trainer.gradient_checkpointing"):
        resolve_placement(cfg(gradient_checkpointing="sometimes"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match=r"cuda:2.*2 CUDA device\(s\)"):
        resolve_device("cuda:2")
