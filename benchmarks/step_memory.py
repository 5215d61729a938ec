"""Peak memory of one ``PolicyTrainer.train_step`` on 1x and 4x the samples at the same token budget.

A step must run forward+backward one micro-batch of at most ``trainer.token_budget`` unique tokens at a time,
so its peak activation memory follows the budget, not the step's total tokens: 4x the samples should cost
about as much as 1x. Each configuration runs in a fresh process (``python -m benchmarks.step_memory ...``,
one JSON line out), so neither inherits the other's allocator state or peak:

- on CPU, the peak resident set size over the step: the kernel's high-water mark (``VmHWM``) reset to the
  current RSS after the trainer is built (``/proc/self/clear_refs``), minus that RSS; where the reset is
  not allowed, ``ru_maxrss`` after the step minus ``ru_maxrss`` before it. The process runs with
  ``MALLOC_MMAP_THRESHOLD_`` at 64 KiB, so every tensor buffer is its own mapping, returned to the system when
  freed: the RSS peak is then the peak of live tensors, the CPU analogue of CUDA's max allocated memory.
  (With glibc's default, freed heap chunks stay resident and the peak also counts fragmentation that depends
  on the order of allocation sizes: measured 1.15 instead of 1.01 for the same two steps.)
- on CUDA, ``torch.cuda.max_memory_allocated`` over the step minus the memory allocated before it.

The 1x step is the longest prefix of the fixture's samples that tree-packs into one row of ``--mem-budget``
tokens, and both steps run with the budget set to that row's unique tokens, so 1x fills its one micro-batch
and the 4x step's micro-batches are no larger.

``trainer.grad_accum`` is 1, so the number of micro-batches comes from the token budget alone: a trainer that
put all rows of a step into its ``grad_accum`` micro-batches would show 4x the memory here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.fixture import DEFAULT_FIXTURE, ROLLOUT_CWD_FIXTURE, load_samples
from benchmarks.models import SMOLLM2_WIDTH, Width, make_base_model

PROJECT_ROOT = Path(__file__).resolve().parents[1]


class NullRegistry:
    """Stands in for the engine's adapter registry: the step publishes its adapter to nowhere."""

    def publish(self, harness: str, version: int, path: Path) -> str:
        return f"{harness}-v{version}"

    def retire_older_than(self, harness: str, min_version: int) -> list[str]:
        return []


@dataclass(frozen=True)
class StepMemory:
    """The two measurements and what they ran on."""

    token_budget: int
    samples: tuple[int, int]
    unique_tokens: tuple[int, int]
    peak_bytes: tuple[int, int]
    micro_batches: tuple[Any, Any]
    device: str
    method: str

    @property
    def ratio(self) -> float:
        return self.peak_bytes[1] / self.peak_bytes[0] if self.peak_bytes[0] > 0 else float("nan")

    def describe(self) -> str:
        parts = [
            f"{n} samples ({unique} unique tokens): {peak / 2**20:.0f} MiB peak over the step ({mb} micro-batches)"
            for n, unique, peak, mb in zip(
                self.samples, self.unique_tokens, self.peak_bytes, self.micro_batches, strict=True
            )
        ]
        return (
            f"one trainer step at token_budget={self.token_budget} on {self.device} ({self.method}): "
            + "; ".join(parts)
            + f"; ratio {self.ratio:.2f}"
        )


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_cpu_peak() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS (``echo 5 > /proc/self/clear_refs``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def measure(model_dir: str, fixture: Path, n_samples: int, token_budget: int) -> dict[str, Any]:
    """Build a PolicyTrainer on ``model_dir``, run one step on the first ``n_samples`` samples, report its peak."""
    import torch

    from harness_rl.config.compose import compose_config
    from harness_rl.rollout.group import ScoredGroup
    from harness_rl.train.trainer import PolicyTrainer

    trainer_cfg = compose_config(
        [
            f"trainer.token_budget={token_budget}",
            "trainer.grad_accum=1",
            "trainer.packing=tree",
            "trainer.train_dtype=float32",
            "trainer.num_threads=null",
            "trainer.lora.rank=8",
            "trainer.lora.alpha=16",
        ]
    ).trainer
    samples = load_samples(fixture)[:n_samples]
    for i, sample in enumerate(samples):
        # Recorded advantages may all be 0 (the base model rarely solves a task); give the loss a gradient.
        sample["advantage"] = 1.0 if i % 2 else -1.0
    groups = []
    for group_id in dict.fromkeys(s["group_id"] for s in samples):
        members = [s for s in samples if s["group_id"] == group_id]
        group = ScoredGroup(group_id, f"task{group_id}", "bench", 0, [], [s["advantage"] for s in members])
        group.samples = members
        groups.append(group)
    with tempfile.TemporaryDirectory(prefix="step-memory-") as run_dir:
        trainer = PolicyTrainer(
            harness="bench",
            model_path=model_dir,
            trainer_cfg=trainer_cfg,
            family="llama",
            registry=NullRegistry(),
            run_dir=Path(run_dir),
        )
        device = next(trainer.model.parameters()).device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            baseline, method = torch.cuda.memory_allocated(device), "torch.cuda.max_memory_allocated"
        elif _reset_cpu_peak():
            baseline, method = _status_kib("VmRSS") * 1024, "peak RSS (VmHWM) over the step"
        else:
            baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            method = "ru_maxrss growth over the step"
        metrics = trainer.train_step(groups)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
        elif method.startswith("peak RSS"):
            peak = _status_kib("VmHWM") * 1024
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "samples": len(samples),
        "peak_bytes": peak - baseline,
        "micro_batches": metrics.get("batch/micro_batches"),
        "device": str(device),
        "method": method,
    }


def largest_single_row_prefix(samples: list[dict[str, Any]], token_budget: int) -> int:
    """How many leading samples tree-pack into one row of ``token_budget`` unique tokens (the 1x step)."""
    from harness_rl.train.packing import plan_rows

    n = 0
    while n < len(samples):
        try:
            if len(plan_rows(samples[: n + 1], token_budget)) > 1:
                break
        except ValueError:  # the next sample alone is over the budget
            break
        n += 1
    if n == 0:
        raise ValueError(f"the fixture's first sample alone exceeds token_budget={token_budget}; raise --mem-budget")
    return n


def _unique_tokens(samples: list[dict[str, Any]]) -> int:
    from harness_rl.train.packing import plan_rows

    return len(plan_rows(samples, sum(len(s["input_ids"]) for s in samples))[0].tokens)


def step_memory_ratio(
    fixture: Path = ROLLOUT_CWD_FIXTURE, *, token_budget: int, layers: int, width: Width = SMOLLM2_WIDTH
) -> StepMemory:
    """Peak memory of a step on 4x the samples over that on 1x, where 1x fills one micro-batch (see above).

    Raises:
        RuntimeError: A measuring process failed (its stderr tail is in the message).
    """
    samples = load_samples(fixture)
    n1 = largest_single_row_prefix(samples, token_budget)
    token_budget = _unique_tokens(samples[:n1])
    n4 = min(4 * n1, len(samples))
    if n4 < 4 * n1:
        print(f"warning: the fixture has {len(samples)} samples, so '4x' is {n4 / n1:.1f}x", file=sys.stderr)
    results = []
    with tempfile.TemporaryDirectory(prefix="step-memory-model-") as model_dir:
        make_base_model(layers, width).save_pretrained(model_dir)
        for n in (n1, n4):
            command = [
                sys.executable,
                "-m",
                "benchmarks.step_memory",
                "--model-dir",
                model_dir,
                "--fixture",
                str(fixture),
                "--samples",
                str(n),
                "--token-budget",
                str(token_budget),
            ]
            env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(64 * 1024)}
            done = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return StepMemory(
        token_budget=token_budget,
        samples=(n1, n4),
        unique_tokens=(_unique_tokens(samples[:n1]), _unique_tokens(samples[:n4])),
        peak_bytes=(results[0]["peak_bytes"], results[1]["peak_bytes"]),
        micro_batches=(results[0]["micro_batches"], results[1]["micro_batches"]),
        device=results[0]["device"],
        method=results[0]["method"],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="measure one trainer step's peak memory (one JSON line)")
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--token-budget", type=int, required=True)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.model_dir, args.fixture, args.samples, args.token_budget)))


if __name__ == "__main__":
    main()
