"""Evaluate a training run: the base model and every checkpoint on held-out tasks, in each harness.

    python eval.py run=RUN_DIR                       # table, plots and summary.csv under RUN_DIR/eval/
    python eval.py run=RUN_DIR checkpoints=[step_2] eval.samples=4 eval.pass_k=[1,4]
    python eval.py run=RUN_DIR eval.cross_harness=true

Finished (checkpoint, harness, task, sample) cells are kept in RUN_DIR/eval/results.jsonl; running the same
command again resumes. Heavy imports happen inside `main`, so `--help` and `--cfg` answer at once.
"""

import logging
import sys

import hydra
from omegaconf import DictConfig

from harness_rl.eval.config import register_eval_configs

register_eval_configs()
log = logging.getLogger("eval")


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from harness_rl.config.validators import ConfigError
    from harness_rl.eval.config import apply_run_config, load_run_config, validate_eval
    from harness_rl.launch.errors import USER_ERRORS

    try:
        cfg = apply_run_config(cfg, load_run_config(cfg.run), list(HydraConfig.get().overrides.task))
        validate_eval(cfg)
    except (ConfigError, FileNotFoundError) as err:
        log.error("invalid config: %s", err)
        sys.exit(2)
    from harness_rl.launch.placement import check_devices
    from harness_rl.models.fetch import resolve_model_path

    try:
        # What this machine may lack (the weights, a GPU) fails here in one line, before the heavy imports.
        resolve_model_path(cfg.model.path)
        check_devices(cfg)
        from harness_rl.eval.evaluate import run_evaluation

        summary = run_evaluation(cfg)
    except (*USER_ERRORS, ValueError) as err:  # bad input or a failed start: one clear line, not a traceback
        log.error("%s: %s", type(err).__name__, err)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: every process the evaluation started has been stopped
        log.warning("interrupted; finished cells are kept and a rerun resumes")
        sys.exit(130)
    last = summary.sort_values("step").iloc[-1]
    return float(last["pass@1"])


if __name__ == "__main__":
    main()
