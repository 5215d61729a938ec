"""The config of ``python eval.py``: the training schema plus the run to evaluate and the ``eval`` options.

What the evaluation runs is fixed by the run it evaluates: its ``model``, ``harness``, ``tasks``, ``budget``,
``safety`` and the adapters' LoRA rank come from the run's ``config.yaml``, so the checkpoints are measured
the way they were trained. A group picked on the command line (``harness=codex``) replaces the run's section,
and dotted overrides (``budget.max_agent_steps=2``) apply on top. The machine-specific groups (``engine``,
``paths``, ``logger``) are the evaluation's own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from harness_rl.config.schema import TrainConfig, register_configs

log = logging.getLogger(__name__)

#: Sections taken from the evaluated run unless the command line picks or changes them (``eval``: an experiment's
#: own evaluation settings; the run's values win over ``conf/eval.yaml``'s defaults, dotted overrides over both).
RUN_SECTIONS = ("model", "harness", "tasks", "budget", "safety", "placement", "eval")


@dataclass
class EvalRootConfig(TrainConfig):
    run: str = MISSING
    checkpoints: list[str] | None = None


def register_eval_configs() -> None:
    """Register the training schemas and resolvers, and ``eval_schema`` (named first in ``conf/eval.yaml``)."""
    register_configs()
    ConfigStore.instance().store(name="eval_schema", node=EvalRootConfig)


def _touched(overrides: list[str]) -> dict[str, list[str]]:
    """Per run section, the command-line overrides that touch it (group picks and dotted keys)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    touched: dict[str, list[str]] = {}
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        section = key.split(".", 1)[0]
        if section in RUN_SECTIONS:
            touched.setdefault(section, []).append(override.input_line)
    return touched


def apply_run_config(cfg: DictConfig, run_cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The evaluation config: ``cfg`` with the run's sections where the command line did not pick a group.

    Args:
        cfg: The composed ``eval.yaml`` config (command-line overrides applied).
        run_cfg: The evaluated run's ``config.yaml``.
        overrides: The command-line overrides (Hydra's ``overrides.task``).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cfg = cfg.copy()
    touched = _touched(overrides)
    if "model" not in touched and run_cfg.get("model", {}).get("name") != cfg.model.name:
        # The model group also sets engine and trainer values (a package-global file); only its model
        # section can be taken from the run.
        log.warning("the run's model is %s but the composed model group is %s: pass model=<group> so that "
                    "group's engine settings apply", run_cfg.model.name, cfg.model.name)  # fmt: skip
    parser = OverridesParser.create()
    with open_dict(cfg):
        for section in RUN_SECTIONS:
            if section not in run_cfg:
                continue
            lines = touched.get(section, [])
            if any("." not in parser.parse_override(line).key_or_group for line in lines):
                continue  # a group picked on the command line wins over the run's section
            try:
                cfg[section] = OmegaConf.merge(cfg[section], run_cfg[section])
            except OmegaConfBaseException as err:
                # A run made before a schema change (a renamed key): its section cannot be read any more.
                log.warning("the run's %s section does not fit the current schema (%s); using the composed "
                            "%s group instead", section, err.msg if hasattr(err, "msg") else err, section)  # fmt: skip
            for line in lines:  # dotted overrides of the section apply on top of the run's values
                override = parser.parse_override(line)
                OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
        cfg.run_name = run_cfg.get("run_name", cfg.run_name)
        lora = run_cfg.get("trainer", {}).get("lora")
        if lora is not None:
            cfg.trainer.lora = OmegaConf.merge(cfg.trainer.lora, lora)
            # vLLM refuses an adapter whose rank is above --max-lora-rank.
            cfg.engine.max_lora_rank = max(int(cfg.engine.max_lora_rank), int(lora.rank))
        if cfg.engine.max_loras is None:
            # Checkpoints are evaluated one at a time: their adapter, and the next one while it loads.
            cfg.engine.max_loras = 2
    return cfg


def load_run_config(run_dir: Path) -> DictConfig:
    """The resolved config a training run wrote to ``config.yaml``.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run folder.
    """
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run= must name a training run folder")
    return OmegaConf.load(path)


def validate_eval(cfg: DictConfig) -> None:
    """The training rules that hold for an evaluation, plus the eval options' own.

    Raises:
        ConfigError: A rule is broken (the message names the keys).
    """
    from harness_rl.config.validators import ConfigError, validate_known_harnesses, validate_lora_rank_fits_engine

    validate_known_harnesses(cfg)
    validate_lora_rank_fits_engine(cfg)
    if cfg.eval.samples < 1:
        raise ConfigError(f"eval.samples={cfg.eval.samples}: need at least one sample per task")
    too_big = [k for k in cfg.eval.pass_k if k > cfg.eval.samples or k < 1]
    if too_big:
        raise ConfigError(f"eval.pass_k={list(cfg.eval.pass_k)}: each k must be in 1..eval.samples={cfg.eval.samples}")
    if cfg.eval.max_sessions < 1:
        raise ConfigError("eval.max_sessions must be >= 1")
