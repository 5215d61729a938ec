"""The CPU learning experiment composes as documented, carries its own evaluation, and the negative-control
switch accepts only +1 and -1."""

from __future__ import annotations

import pytest

from harness_rl.config.compose import compose_config
from harness_rl.config.validators import ConfigError, validate


def test_cpu_learning_experiment_composes_and_validates():
    cfg = compose_config(["experiment=cpu_learning", "seed=2"])
    validate(cfg)
    assert cfg.run_name == "cpu_learning-seed2"
    assert [s.name for s in cfg.tasks.sources] == ["file_write"] and cfg.tasks.split == "train"
    assert cfg.eval.split == "heldout" and cfg.eval.samples >= 2
    assert cfg.budget.max_agent_steps == 1
    assert cfg.trainer.advantage_sign == 1


@pytest.mark.parametrize("sign", [0, 0.5, 2])
def test_advantage_sign_other_than_plus_minus_one_is_refused(sign):
    with pytest.raises(ConfigError, match="trainer.advantage_sign must be 1 or -1"):
        validate(compose_config([f"trainer.advantage_sign={sign}"]))


def test_negative_control_flips_the_sign():
    validate(compose_config(["experiment=cpu_learning", "trainer.advantage_sign=-1"]))


def test_stop_rule_is_off_by_default_and_refuses_negative_counts():
    assert compose_config([]).trainer.stop_after_uninformative_groups == 0
    assert compose_config(["experiment=cpu_learning"]).trainer.stop_after_uninformative_groups > 0
    with pytest.raises(ConfigError, match="stop_after_uninformative_groups must be a whole number"):
        validate(compose_config(["trainer.stop_after_uninformative_groups=-1"]))
