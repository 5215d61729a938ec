"""Typed schemas for the Hydra config groups.

Each dataclass is the schema of one group under ``conf/``. The root schema is registered in Hydra's
ConfigStore as ``train_schema`` and named first in ``conf/train.yaml``'s defaults list, so a misspelled or
unknown key fails when the config is composed instead of being silently ignored. Docs for each field live in
the YAML files (one place only); the schema only fixes names and types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from harness_rl.safety.config import SafetyConfig

#: The checkout this package lives in (``conf/``, ``tools/`` and ``runs/`` sit here by default).
PROJECT_ROOT = Path(__file__).resolve().parents[2]

#: Harnesses the project knows. A name outside this list fails at composition (see validators.py).
KNOWN_HARNESSES = ("pi", "opencode", "hermes", "claude_code", "codex", "mini_swe_agent")


@dataclass
class PathsConfig:
    root_dir: str = MISSING
    runs_dir: str = MISSING
    tasks_cache_dir: str = MISSING


@dataclass
class ModelConfig:
    name: str = MISSING
    path: str = MISSING
    family: str = "llama"
    max_model_len: int = 8192
    tool_parser: str | None = "hermes"
    context_length: int = 8192
    params_b: float | None = None
    hidden_size: int | None = None
    num_layers: int | None = None
    vocab_size: int | None = None


@dataclass
class EngineConfig:
    backend: str = "auto"
    host: str = "127.0.0.1"
    port: int = 0
    dtype: str = "auto"
    max_lora_rank: int = 64
    max_loras: int | None = None
    kv_cache_gib: float = 4.0
    gpu_memory_utilization: float = 0.85
    startup_timeout_s: float = 600.0
    logprobs_mode: str = "processed_logprobs"
    generation_config: str = "vllm"
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class LoraConfig:
    rank: int = 32
    alpha: int = 64
    dropout: float = 0.0
    target_modules: Any = "all-linear"


@dataclass
class TrainerConfig:
    algorithm: str = "grpo"
    num_generations: int = 8
    tasks_per_step: int = 6
    max_sessions: int = 48
    lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    temperature: float = 0.8
    top_p: float = 1.0
    max_tokens_per_turn: int = 32768
    max_staleness: int = 4
    grad_accum: int = 4
    token_budget: int = 65536
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = 3.0
    max_log_ratio: float | None = None
    scale_rewards: bool = True
    advantage_sign: float = 1.0
    max_steps: int = 200
    checkpoint_every: int = 10
    stop_after_uninformative_groups: int = 0
    packing: str = "auto"
    train_dtype: str = "float32"
    device: str = "auto"
    gradient_checkpointing: Any = "auto"
    num_threads: int | None = None
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class PlacementConfig:
    name: str = "cpu"
    gpus: int = 0
    gpu_memory_gib: float = 141.0
    engine_gpus: list[int] = field(default_factory=list)
    trainer_gpus: list[int] = field(default_factory=list)
    trained_token_fraction: float = 0.5
    reserve_gib: float = 2.0


@dataclass
class BudgetConfig:
    max_agent_steps: int = 50
    max_requests: int = 60
    session_timeout_s: float = 1200.0
    verifier_timeout_s: float = 60.0
    memory_limit_gib: float = 8.0
    niceness: int = 10


@dataclass
class SandboxConfig:
    allow_unisolated: bool = False


@dataclass
class TaskSourceConfig:
    name: str = MISSING
    weight: float = 1.0
    folder: str | None = None
    n: int | None = None
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class TasksConfig:
    sources: list[TaskSourceConfig] = field(default_factory=lambda: [TaskSourceConfig(name="smoke")])
    split: str = "train"
    difficulty_weights: dict[str, float] = field(default_factory=lambda: {"easy": 1.0, "medium": 1.0, "hard": 1.0})
    check_disjoint: bool = True
    efficiency_bonus: float = 0.1


@dataclass
class MiniSweAgentOptions:
    mode: str = "text"


@dataclass
class HarnessConfig:
    mix: list[str] = MISSING
    mini_swe_agent: MiniSweAgentOptions = field(default_factory=MiniSweAgentOptions)


@dataclass
class WandbConfig:
    enabled: bool = True
    mode: str = "offline"
    project: str = "harness-rl"


@dataclass
class LoggerConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class LauncherConfig:
    name: str = "local"


@dataclass
class ProxyConfig:
    host: str = "127.0.0.1"
    port: int = 0


@dataclass
class EvalOptions:
    """How ``eval.py`` measures a run (``conf/eval.yaml`` documents each key). A training config carries it too,
    so that an experiment fixes its own evaluation (held-out split, samples per task) and ``eval.py run=RUN``
    uses it; command-line overrides still win."""

    split: str = "heldout"
    task_ids: list[str] | None = None
    max_tasks: int | None = None
    samples: int = 1
    pass_k: list[int] = field(default_factory=list)
    cross_harness: bool = False
    max_sessions: int = 4
    temperature: float | None = None
    max_tokens_per_turn: int | None = None
    bootstrap_seed: int = 0


@dataclass
class TrainConfig:
    seed: int = 0
    run_name: str = MISSING
    run_dir: str = MISSING
    paths: PathsConfig = field(default_factory=PathsConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    eval: EvalOptions = field(default_factory=EvalOptions)


def _harness_mix_name(mix: Any) -> str:
    names = list(mix)
    return names[0] if len(names) == 1 else "+".join(names)


def register_configs() -> None:
    """Register the schemas and resolvers. Called by the entry points before Hydra composes."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    if not OmegaConf.has_resolver("harness_mix_name"):
        OmegaConf.register_new_resolver("harness_mix_name", _harness_mix_name)
    if not OmegaConf.has_resolver("project_root"):
        OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT))
