"""The eval config takes the evaluated run's model, harness, tasks, budget and safety; a group picked on the
command line replaces the run's section, dotted overrides apply on top, and the engine fits the adapters."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness_rl.config.schema import PROJECT_ROOT
from harness_rl.config.validators import ConfigError
from harness_rl.eval.config import apply_run_config, load_run_config, register_eval_configs, validate_eval


def composed(overrides: list[str]):
    register_eval_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(config_name="eval", overrides=overrides)


def run_config(tmp_path):
    cfg = composed(["run=x"])
    run = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    del run["eval"], run["run"], run["checkpoints"]
    run.run_name = "my-run"
    run.model.name = "my-model"
    run.budget.max_agent_steps = 7
    run.budget.session_timeout_s = 99
    run.trainer.lora.rank = 32
    run.harness.mix = ["pi", "hermes"]
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(run))
    return load_run_config(tmp_path)


def test_run_sections_are_used_and_command_line_wins(tmp_path):
    run = run_config(tmp_path)
    overrides = [f"run={tmp_path}", "budget.max_agent_steps=2", "eval.samples=3"]
    cfg = apply_run_config(composed(overrides), run, overrides)
    assert cfg.run_name == "my-run" and cfg.model.name == "my-model"
    assert list(cfg.harness.mix) == ["pi", "hermes"]
    assert cfg.budget.max_agent_steps == 2  # the dotted override over the run's 7
    assert cfg.budget.session_timeout_s == 99  # the run's value
    assert cfg.engine.max_lora_rank >= 32 and cfg.engine.max_loras == 2
    assert cfg.eval.samples == 3
    validate_eval(cfg)


def test_a_group_picked_on_the_command_line_replaces_the_runs_section(tmp_path):
    run = run_config(tmp_path)
    overrides = [f"run={tmp_path}", "harness=mini_swe_agent"]
    cfg = apply_run_config(composed(overrides), run, overrides)
    assert list(cfg.harness.mix) == ["mini_swe_agent"]


def test_a_section_that_no_longer_fits_the_schema_falls_back_to_the_group(tmp_path):
    run = run_config(tmp_path)
    run.tasks = OmegaConf.create({"no_such_key": 1, "split": "train"})
    cfg = apply_run_config(composed([f"run={tmp_path}"]), run, [f"run={tmp_path}"])
    assert "no_such_key" not in cfg.tasks


def test_invalid_eval_options_name_the_key(tmp_path):
    run = run_config(tmp_path)
    overrides = [f"run={tmp_path}", "eval.samples=2", "eval.pass_k=[4]"]
    with pytest.raises(ConfigError, match="eval.pass_k"):
        validate_eval(apply_run_config(composed(overrides), run, overrides))
    with pytest.raises(FileNotFoundError, match="run= must name"):
        load_run_config(tmp_path / "missing")


def test_an_experiments_eval_section_is_used_and_the_command_line_wins(tmp_path):
    run = run_config(tmp_path)
    run.eval = OmegaConf.create({"split": "heldout", "max_tasks": 40, "samples": 2, "temperature": 0.8})
    overrides = [f"run={tmp_path}", "eval.samples=4"]
    cfg = apply_run_config(composed(overrides), run, overrides)
    assert cfg.eval.max_tasks == 40 and cfg.eval.temperature == 0.8  # the run's own evaluation settings
    assert cfg.eval.samples == 4  # the command line over the run's 2
    assert cfg.eval.max_sessions == 4  # a key the run left at its default
