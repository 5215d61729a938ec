"""The end-to-end training run, made once per test session and shared by the training and evaluation tests:
`python train.py` on the embedded default for TRAIN_STEPS optimizer steps (one checkpoint per step)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRAIN_STEPS = 2


def run_train(*overrides: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true"}
    return subprocess.run(
        [sys.executable, "train.py", *overrides],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def train_run(tmp_path_factory):
    """``(run_dir, model name)`` of one finished `python train.py` run with TRAIN_STEPS checkpoints."""
    run_dir = tmp_path_factory.mktemp("e2e") / "run"
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    # max_staleness=0: a group launched while step 1 trains (on v0) is cancelled when v1 is published, so step 2
    # trains on a group that sampled v1 and the test sees every version but the last named by requests; with the
    # default staleness such a group may serve step 2 and v1 never be sampled in a 2-step run.
    done = run_train(
        f"run_dir={run_dir}",
        f"model.name={name}",
        f"trainer.max_steps={TRAIN_STEPS}",
        "trainer.max_staleness=0",
        "logger.wandb.mode=offline",
    )
    print(done.stdout[-5000:], done.stderr[-8000:])
    assert done.returncode == 0, done.stderr[-8000:]
    return run_dir, name
