"""Compose the project's Hydra config outside ``@hydra.main`` (module CLIs such as ``engine serve``)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from harness_rl.config.schema import PROJECT_ROOT, register_configs

CONFIG_DIR = PROJECT_ROOT / "conf"


def compose_config(overrides: list[str], config_name: str = "train") -> DictConfig:
    """The config ``python train.py <overrides>`` would run with, validated.

    Raises:
        ConfigError: A cross-field rule is broken (the message names the keys).
        FileNotFoundError: The checkout's ``conf/`` folder is missing (the package is used from a checkout).
    """
    from hydra import compose, initialize_config_dir

    from harness_rl.config.validators import validate

    if not (CONFIG_DIR / f"{config_name}.yaml").exists():
        raise FileNotFoundError(f"{CONFIG_DIR / config_name}.yaml not found: run from a harness-rl checkout")
    register_configs()
    with initialize_config_dir(config_dir=str(Path(CONFIG_DIR)), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=list(overrides))
    validate(cfg)
    return cfg
