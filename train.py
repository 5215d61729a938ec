"""Train one LoRA adapter per harness with asynchronous GRPO inside the unmodified harnesses.

    python train.py                              # the embedded default on CPU (what `make train` runs)
    python train.py model=lfm3 harness=all       # the study's three-harness mix
    python train.py --cfg job model=lfm3         # print the composed config and exit

Heavy imports (torch, vLLM, the trainer) happen inside `main`, so `--help` and `--cfg` answer at once.
"""

import logging
import sys

import hydra
from omegaconf import DictConfig

from harness_rl.config.schema import register_configs

register_configs()
log = logging.getLogger("train")


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from harness_rl.config.validators import ConfigError, validate

    try:
        validate(cfg)
    except ConfigError as err:
        log.error("invalid config: %s", err)
        sys.exit(2)
    from harness_rl.launch.errors import USER_ERRORS
    from harness_rl.launch.train_run import run_training

    try:
        return run_training(cfg)
    except USER_ERRORS as err:  # bad input or a failed start: one clear line, not a traceback
        log.error("%s: %s", type(err).__name__, err)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: every process the run started has been stopped by now
        log.warning("interrupted; all processes this run started were stopped")
        sys.exit(130)


if __name__ == "__main__":
    main()
