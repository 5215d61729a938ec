"""Cross-field rules a config must satisfy before anything starts.

Each rule is a named function that raises ``ConfigError`` with a message naming the keys to change, so a bad
combination fails at composition time instead of minutes later inside vLLM or the trainer.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from omegaconf import DictConfig

from harness_rl.config.schema import KNOWN_HARNESSES
from harness_rl.models.size import GIB, MIN_KV_CACHE_GIB, model_size


class ConfigError(ValueError):
    """A composed config breaks a cross-field rule; the message names the keys to change."""


def validate_known_harnesses(cfg: DictConfig) -> None:
    unknown = [name for name in cfg.harness.mix if name not in KNOWN_HARNESSES]
    if unknown:
        raise ConfigError(f"harness.mix names unknown harness(es) {unknown}; known: {list(KNOWN_HARNESSES)}")
    if len(set(cfg.harness.mix)) != len(cfg.harness.mix):
        raise ConfigError(f"harness.mix lists a harness twice: {list(cfg.harness.mix)}")


def validate_lora_rank_fits_engine(cfg: DictConfig) -> None:
    if cfg.trainer.lora.rank > cfg.engine.max_lora_rank:
        raise ConfigError(
            f"trainer.lora.rank={cfg.trainer.lora.rank} is above engine.max_lora_rank="
            f"{cfg.engine.max_lora_rank}: vLLM would refuse the adapter; raise engine.max_lora_rank "
            "or lower trainer.lora.rank"
        )


def required_adapter_slots(cfg: DictConfig) -> int:
    """Adapter versions alive at once: per trainer, its staleness window plus the newest and one unloading."""
    return len(cfg.harness.mix) * (cfg.trainer.max_staleness + 2)


def validate_adapter_slots_fit_staleness(cfg: DictConfig) -> None:
    slots = cfg.engine.max_loras
    need = required_adapter_slots(cfg)
    if slots is not None and slots < need:
        raise ConfigError(
            f"engine.max_loras={slots} is too few adapter slots: {len(cfg.harness.mix)} trainer(s) "
            f"(harness.mix) x (trainer.max_staleness={cfg.trainer.max_staleness} + 2) = {need}; "
            "raise engine.max_loras, set it to null (derived), or lower trainer.max_staleness"
        )


def validate_group_fits_sessions(cfg: DictConfig) -> None:
    if cfg.trainer.max_sessions < cfg.trainer.num_generations:
        raise ConfigError(
            f"trainer.max_sessions={cfg.trainer.max_sessions} is below trainer.num_generations="
            f"{cfg.trainer.num_generations}: a GRPO group could never run at once"
        )
    if cfg.trainer.num_generations < 2:
        raise ConfigError("trainer.num_generations must be >= 2: GRPO advantages need a group")


def validate_sampling_policy(cfg: DictConfig) -> None:
    if cfg.trainer.top_p != 1.0:
        raise ConfigError(
            f"trainer.top_p={cfg.trainer.top_p}: training samples with top_p 1.0 so the captured log-probs "
            "are those of the distribution being trained"
        )
    if cfg.trainer.max_tokens_per_turn >= cfg.model.max_model_len:
        raise ConfigError(
            f"trainer.max_tokens_per_turn={cfg.trainer.max_tokens_per_turn} must be below "
            f"model.max_model_len={cfg.model.max_model_len}"
        )


def validate_packing(cfg: DictConfig) -> None:
    # Every family may be tree-packed: hybrid (lfm2) convolutions see each sample's own path in the tree.
    if cfg.trainer.packing not in ("auto", "tree", "padded"):
        raise ConfigError(f"trainer.packing={cfg.trainer.packing!r}: use auto, tree or padded")


def validate_advantage_sign(cfg: DictConfig) -> None:
    # Fails before any engine starts; the trainer checks the same (train/loss.py check_advantage_sign).
    sign = cfg.trainer.advantage_sign
    if isinstance(sign, bool) or sign not in (1, -1):
        raise ConfigError(f"trainer.advantage_sign must be 1 or -1 (-1 only for the negative control), got {sign!r}")


def validate_stop_rule(cfg: DictConfig) -> None:
    limit = cfg.trainer.stop_after_uninformative_groups
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigError(
            f"trainer.stop_after_uninformative_groups must be a whole number >= 0 (0 = never stop), got {limit!r}"
        )


_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def validate_devices(cfg: DictConfig) -> None:
    """Spellings only; whether this machine has the device is checked before the run starts (launch/placement)."""
    if not _DEVICE.fullmatch(str(cfg.trainer.device)):
        raise ConfigError(f"trainer.device={cfg.trainer.device!r}: use auto, cpu, cuda or cuda:N")
    if str(cfg.trainer.gradient_checkpointing).lower() not in ("auto", "true", "false"):
        raise ConfigError(
            f"trainer.gradient_checkpointing={cfg.trainer.gradient_checkpointing!r}: use auto, true or false"
        )
    if cfg.engine.backend not in ("auto", "cpu", "gpu"):
        raise ConfigError(f"engine.backend={cfg.engine.backend!r}: use auto, cpu or gpu")
    if not 0.0 < cfg.engine.gpu_memory_utilization <= 1.0:
        raise ConfigError(f"engine.gpu_memory_utilization={cfg.engine.gpu_memory_utilization}: use a share in (0, 1]")
    if cfg.engine.generation_config not in ("vllm", "auto"):
        raise ConfigError(
            f"engine.generation_config={cfg.engine.generation_config!r}: use vllm (sample what the trainer computes) "
            "or auto (apply the model's generation_config.json)"
        )


def validate_placement_shape(cfg: DictConfig) -> None:
    place = cfg.placement
    indices = [*place.engine_gpus, *place.trainer_gpus]
    bad = [i for i in indices if not 0 <= i < place.gpus]
    if bad:
        raise ConfigError(
            f"placement {place.name}: GPU index(es) {bad} outside the node's placement.gpus={place.gpus} "
            "(placement.engine_gpus, placement.trainer_gpus use 0..gpus-1)"
        )
    if len(set(place.engine_gpus)) != len(place.engine_gpus):
        raise ConfigError(f"placement.engine_gpus={list(place.engine_gpus)} lists a GPU twice")
    if not 0.0 < place.trained_token_fraction <= 1.0:
        raise ConfigError(f"placement.trained_token_fraction={place.trained_token_fraction}: use a share in (0, 1]")


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.1f} GiB"


def validate_placement_fits(cfg: DictConfig) -> None:
    """The placement's GPUs hold the engine and the trainers (memory per GPU from ``placement.gpu_memory_gib``).

    Checked whenever the placement lists GPUs, as the node's arithmetic (see harness_rl/models/size.py for what
    is counted): the engine's bf16 weights within ``engine.gpu_memory_utilization`` of each of its GPUs; per
    trainer GPU, every trainer placed there resident (bf16 weights + LoRA training state) plus the largest
    micro-batch's activations (the step loop trains one harness at a time), within what the engine leaves.
    """
    place = cfg.placement
    if not place.engine_gpus and not place.trainer_gpus:
        return
    size = model_size(cfg.model)
    if size is None:
        raise ConfigError(
            f"placement {place.name} lists GPUs but the size of {cfg.model.path} is unknown: its config.json is not "
            "on this machine; set model.params_b, model.hidden_size, model.num_layers and model.vocab_size"
        )
    memory = place.gpu_memory_gib * GIB
    reserve = place.reserve_gib * GIB
    utilization = cfg.engine.gpu_memory_utilization
    engine_gpus = list(place.engine_gpus)
    if engine_gpus:
        per_gpu = size.weight_bytes() / len(engine_gpus)
        share = utilization * memory
        if per_gpu + MIN_KV_CACHE_GIB * GIB > share:
            raise ConfigError(
                f"placement {place.name}: vLLM's bf16 weights of {cfg.model.name} ({_gib(per_gpu)} per GPU over "
                f"{len(engine_gpus)} GPU(s)) plus a {MIN_KV_CACHE_GIB:g} GiB KV cache do not fit its share "
                f"engine.gpu_memory_utilization={utilization} x placement.gpu_memory_gib={place.gpu_memory_gib:g} = "
                f"{_gib(share)}; raise engine.gpu_memory_utilization or put vLLM on more GPUs "
                "(placement.engine_gpus, tensor parallel)"
            )
    if not place.trainer_gpus:
        return
    resident = size.trainer_resident_bytes(cfg.trainer.lora.rank)
    activations = size.activation_bytes(cfg.trainer.token_budget, place.trained_token_fraction)
    trainers = len(cfg.harness.mix)
    for gpu in sorted(set(place.trainer_gpus)):
        count = sum(1 for i in range(trainers) if place.trainer_gpus[i % len(place.trainer_gpus)] == gpu)
        if count == 0:
            continue
        shared = gpu in engine_gpus
        available = (1.0 - utilization if shared else 1.0) * memory - reserve
        need = count * resident + activations
        if need > available:
            left = (
                f"what vLLM leaves on it, (1 - engine.gpu_memory_utilization={utilization}) x "
                f"placement.gpu_memory_gib={place.gpu_memory_gib:g}"
                if shared
                else f"placement.gpu_memory_gib={place.gpu_memory_gib:g}"
            )
            raise ConfigError(
                f"placement {place.name}: GPU {gpu} holds {count} trainer(s) of {cfg.model.name} "
                f"({count} x {_gib(resident)} bf16 weights + LoRA state, + {_gib(activations)} activations for "
                f"trainer.token_budget={cfg.trainer.token_budget}) = {_gib(need)}, more than {left} minus "
                f"placement.reserve_gib={place.reserve_gib:g} = {_gib(available)}; lower trainer.token_budget"
                f"{', lower engine.gpu_memory_utilization' if shared else ''} or spread the trainers over more GPUs "
                "(placement.trainer_gpus, or another placement=NAME)"
            )


RULES: tuple[Callable[[DictConfig], None], ...] = (
    validate_known_harnesses,
    validate_lora_rank_fits_engine,
    validate_adapter_slots_fit_staleness,
    validate_group_fits_sessions,
    validate_sampling_policy,
    validate_packing,
    validate_advantage_sign,
    validate_stop_rule,
    validate_devices,
    validate_placement_shape,
    validate_placement_fits,
)


def validate(cfg: DictConfig) -> None:
    """Run every rule; raise ``ConfigError`` for the first one broken."""
    for rule in RULES:
        rule(cfg)
