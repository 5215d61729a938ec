"""Train one LoRA adapter per harness with asynchronous GRPO inside the unmodified harnesses.

    python train.py                              # the embedded default on CPU (what `make train` runs)
    python train.py model=lfm3 harness=all       # the study's three-harness mix
    python train.py --cfg job model=lfm3         # print the composed config and exit

Heavy imports (torch, vLLM, the trainer) happen inside `main`, so `--help` and `--cfg` answer at once.
"""

import contextlib
import logging
import sys

import hydra
from omegaconf import DictConfig

from harness_rl.config.schema import register_configs

register_configs()
log = logging.getLogger("train")


def discard_unstarted_run_dir() -> None:
    """Remove the run folder when it holds only what Hydra wrote before ``main`` (``.hydra/``, ``train.log``).

    Hydra creates ``hydra.run.dir`` (the run folder) before ``main`` runs; a run that failed its checks before
    starting must not leave an empty-looking run behind for eval and the notebooks to trip over.
    """
    import shutil
    from pathlib import Path

    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    out = Path(hydra_cfg.runtime.output_dir)
    if not out.is_dir() or {p.name for p in out.iterdir()} - {".hydra", f"{hydra_cfg.job.name}.log"}:
        return
    shutil.rmtree(out, ignore_errors=True)
    with contextlib.suppress(OSError):  # the run name's folder, when this was its only run
        out.parent.rmdir()


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from harness_rl.config.validators import ConfigError, validate

    try:
        validate(cfg)
    except ConfigError as err:
        log.error("invalid config: %s", err)
        discard_unstarted_run_dir()
        sys.exit(2)
    from harness_rl.launch.errors import USER_ERRORS
    from harness_rl.launch.placement import check_devices
    from harness_rl.models.fetch import resolve_model_path

    try:
        # The run checks these again; doing it before the heavy imports makes a missing model fail in seconds.
        resolve_model_path(cfg.model.path)
        check_devices(cfg)
        from harness_rl.launch.train_run import run_training

        return run_training(cfg)
    except USER_ERRORS as err:  # bad input or a failed start: one clear line, not a traceback
        log.error("%s: %s", type(err).__name__, err)
        discard_unstarted_run_dir()
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: every process the run started has been stopped by now
        log.warning("interrupted; all processes this run started were stopped")
        sys.exit(130)


if __name__ == "__main__":
    main()
