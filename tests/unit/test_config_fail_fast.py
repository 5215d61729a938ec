"""`python train.py` on a machine that lacks what the config asks for fails before anything starts: one line
saying what to do, no traceback, no vLLM, no run folder; `--cfg job` shows where everything would run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness_rl.config.schema import PROJECT_ROOT


def train(*overrides: str, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess:
    """Run train.py; ``env`` entries set to None are removed from the environment."""
    merged = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "train.py"), *overrides],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env={key: value for key, value in merged.items() if value is not None},
        timeout=300,
    )


def assert_failed_in_one_line(proc: subprocess.CompletedProcess, runs: Path, *needles: str) -> str:
    out = proc.stdout + proc.stderr
    errors = [line for line in out.splitlines() if "[ERROR]" in line]
    assert proc.returncode == 1, out
    assert "Traceback" not in out
    assert len(errors) == 1, out
    for needle in needles:
        assert needle in errors[0]
    assert not runs.exists() or not any(runs.iterdir()), list(runs.rglob("*"))  # no run folder left behind
    return errors[0]


def test_study_model_without_weights_says_how_to_get_them(tmp_path):
    runs = tmp_path / "runs"
    proc = train(
        "model=lfm3",
        "harness=all",
        f"paths.runs_dir={runs}",
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty_hf_home"), "HF_HUB_CACHE": None},
    )
    line = assert_failed_in_one_line(proc, runs, "ModelFetchError", "not in the hub cache")
    assert "`hf download LiquidAI/LFM3-1.7B`" in line and "model.path=/path/to/model" in line


def test_cuda_trainer_without_cuda_is_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the run would start")
    runs = tmp_path / "runs"
    proc = train("trainer.device=cuda", f"paths.runs_dir={runs}")
    assert_failed_in_one_line(proc, runs, "DeviceError", "trainer.device=cuda but torch sees no CUDA device")


def test_cfg_job_shows_placement_and_device_keys():
    proc = train("--cfg", "job", "model=lfm3", "harness=all", "engine=gpu")
    assert proc.returncode == 0, proc.stderr
    for line in (
        "placement:",
        "  name: h200x2",
        "  engine_gpus:",
        "  trainer_gpus:",
        "  gpu_memory_gib: 141.0",
        "  device: auto",
        "  gradient_checkpointing: auto",
        "  gpu_memory_utilization: 0.85",
        "  generation_config: vllm",
        "  dual_clip: 3.0",
        "  backend: gpu",
    ):
        assert f"\n{line}" in proc.stdout, line
