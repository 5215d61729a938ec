"""`python train.py` on the embedded default runs real asynchronous GRPO end to end on CPU: vLLM, the capture
proxy, mini-swe-agent and the trainer; every step's adapter is loaded into vLLM and named by requests, the
trainer reproduces the engine's log-probs at step 0, LoRA weights move, and no process outlives the run."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from harness_rl.proxy.export import read_trace_jsonl
from tests.e2e.conftest import TRAIN_STEPS, run_train
from tests.processes import processes_mentioning

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.harness]

ROOT = Path(__file__).resolve().parents[2]
STEPS = TRAIN_STEPS  # the session-scoped `train_run` fixture (tests/e2e/conftest.py) trains this many steps
#: fp32 trainer vs fp32 vLLM CPU: the same weights and math, different kernels (oneDNN GEMMs, a paged
#: attention kernel, different summation order); measured max |diff| is ~1e-3 nats over a few thousand tokens.
LOGPROB_TOLERANCE = 2e-2


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    """The run's ERROR log lines (Hydra logs to stdout)."""
    return [line for line in (done.stdout + done.stderr).splitlines() if "[ERROR]" in line]


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_run_folder_is_complete(train_run):
    run_dir, _ = train_run
    for name in ("config.yaml", "metadata.json", "metrics.jsonl", "rollouts.jsonl", "engine.log"):
        assert (run_dir / name).is_file(), name
    assert list(run_dir.glob("rollouts/mini_swe_agent/g*/r*/trace.jsonl"))
    assert list(run_dir.glob("checkpoints/mini_swe_agent/step_*/adapter/adapter_model.safetensors"))
    assert list(run_dir.glob("wandb/offline-run-*"))


def test_at_least_two_optimizer_steps(train_run):
    run_dir, _ = train_run
    steps = [m for m in read_metrics(run_dir) if "mini_swe_agent/train/loss" in m]
    assert [m["step"] for m in steps] == list(range(1, STEPS + 1))
    for m in steps:
        assert m["mini_swe_agent/batch/samples_per_step"] > 0
        assert m["mini_swe_agent/train/trained_tokens"] > 0


def test_each_version_loaded_and_named_by_requests(train_run):
    run_dir, _ = train_run
    # The registry records a version only after vLLM answered 200 to its load request.
    published = [m["mini_swe_agent/policy/adapter"] for m in read_metrics(run_dir) if "mini_swe_agent/train/loss" in m]
    assert published == [f"mini_swe_agent-v{v}" for v in range(1, STEPS + 1)]
    engine_log = (run_dir / "engine.log").read_text()
    assert engine_log.count('"POST /v1/load_lora_adapter HTTP/1.1" 200') == STEPS + 1
    requested = set()
    for trace_path in run_dir.glob("rollouts/mini_swe_agent/g*/r*/trace.jsonl"):
        trace = read_trace_jsonl(trace_path)
        requested.update(node["model"] for node in trace["nodes"] if not node["budget_exhausted"])
    for version in range(STEPS + 1):
        name = f"mini_swe_agent-v{version}"
        assert (run_dir / "adapters" / name / "adapter_model.safetensors").exists()
        if version < STEPS:  # the last version is published after the last step; nothing samples it
            assert name in requested, f"no request named {name}; requested: {sorted(requested)}"


def test_trainer_logprobs_match_engine_at_step_0(train_run):
    run_dir, _ = train_run
    first = next(m for m in read_metrics(run_dir) if "mini_swe_agent/train/loss" in m)
    diff = first["mini_swe_agent/train/onpolicy_logprob_absdiff_max"]
    print(f"step-0 max |trainer - engine| log-prob difference: {diff:.2e}")
    assert diff < LOGPROB_TOLERANCE


def test_lora_parameters_changed(train_run):
    run_dir, _ = train_run
    first = load_file(str(run_dir / "adapters/mini_swe_agent-v0/adapter_model.safetensors"))
    last = load_file(str(run_dir / f"adapters/mini_swe_agent-v{STEPS}/adapter_model.safetensors"))
    assert first.keys() == last.keys()
    assert any(not torch.equal(first[k], last[k]) for k in first)


def test_no_process_outlives_the_run(train_run):
    _, name = train_run
    assert processes_mentioning(name) == []


def test_engine_that_fails_to_start_gives_one_clear_error(tmp_path):
    name = f"e2e-bad-{uuid.uuid4().hex[:8]}"
    done = run_train(f"run_dir={tmp_path / 'run'}", f"model.name={name}", "logger=none",
                     "engine.extra_args=[--no-such-vllm-flag]", timeout=600)  # fmt: skip
    assert done.returncode == 1
    errors = error_lines(done)
    assert errors and "EngineStartError" in errors[0], done.stdout[-3000:]
    assert processes_mentioning(name) == []


def test_missing_model_gives_one_clear_error(tmp_path):
    done = run_train(f"run_dir={tmp_path / 'run'}", "model.path=/no/such/model", "logger=none", timeout=120)
    assert done.returncode == 1
    errors = error_lines(done)
    assert errors and "/no/such/model" in errors[0], done.stdout[-3000:]


def test_ctrl_c_mid_run_stops_every_process(tmp_path):
    """Ctrl-C while rollouts are in flight: the run exits and leaves no engine, harness or sandbox behind."""
    import signal
    import time

    run_dir = tmp_path / "run"
    name = f"e2e-int-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [sys.executable, "train.py", f"run_dir={run_dir}", f"model.name={name}", "logger=none"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # A suite started in the background of a non-interactive shell inherits SIGINT ignored, and Python
        # then installs no KeyboardInterrupt handler: give train.py the disposition a terminal's Ctrl-C meets.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 300
        # Wait until harness sessions are running (their rollout folders exist).
        while not list(run_dir.glob("rollouts/mini_swe_agent/g*/r*/harness")) and time.monotonic() < deadline:
            assert proc.poll() is None, "train.py exited before any rollout started"
            time.sleep(1)
        assert processes_mentioning(name), "the engine should be running"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:  # the test failed: still stop what the run started (SIGTERM runs its cleanup)
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert processes_mentioning(name) == []
    assert processes_mentioning(str(run_dir)) == []  # no harness or bwrap of this run is left
