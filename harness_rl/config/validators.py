"""Cross-field rules a config must satisfy before anything starts.

Each rule is a named function that raises ``ConfigError`` with a message naming the keys to change, so a bad
combination fails at composition time instead of minutes later inside vLLM or the trainer.
"""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig

from harness_rl.config.schema import KNOWN_HARNESSES


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
    if cfg.trainer.packing not in ("auto", "tree", "padded"):
        raise ConfigError(f"trainer.packing={cfg.trainer.packing!r}: use auto, tree or padded")
    if cfg.trainer.packing == "tree" and cfg.model.family == "lfm2":
        raise ConfigError(
            "trainer.packing=tree with model.family=lfm2: short-conv layers mix tokens in packed order, "
            "so hybrid models need trainer.packing=padded (or auto)"
        )


RULES: tuple[Callable[[DictConfig], None], ...] = (
    validate_known_harnesses,
    validate_lora_rank_fits_engine,
    validate_adapter_slots_fit_staleness,
    validate_group_fits_sessions,
    validate_sampling_policy,
    validate_packing,
)


def validate(cfg: DictConfig) -> None:
    """Run every rule; raise ``ConfigError`` for the first one broken."""
    for rule in RULES:
        rule(cfg)
