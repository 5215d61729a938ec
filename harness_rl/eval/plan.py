"""What an evaluation runs: the checkpoints of a run, and one cell per (checkpoint, harness, task, sample).

A checkpoint is ``<run>/checkpoints/<harness>/step_<k>/adapter`` (written by the trainer); the base model
(no adapter) is always evaluated too, as the checkpoint ``base``. Each adapter is evaluated in the harness it
was trained for, or in every harness of the evaluation when ``cross_harness`` is asked for (transfer).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness_rl.eval.metrics import BASE

_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    """One adapter to evaluate (or the base model when ``adapter_dir`` is None).

    Attributes:
        label: ``base`` or ``<harness>/step_<k>`` (k without padding); the row name in results and tables.
        trained_harness: The harness the adapter was trained in (None for the base model).
        step: Optimizer step of the checkpoint (0 for the base model).
        adapter_dir: PEFT adapter folder the engine loads.
    """

    label: str
    trained_harness: str | None
    step: int
    adapter_dir: Path | None

    @property
    def engine_name(self) -> str | None:
        """The name the adapter is loaded under in the engine (None: requests name the base model)."""
        return None if self.trained_harness is None else f"eval-{self.trained_harness}-step{self.step}"


BASE_CHECKPOINT = Checkpoint(BASE, None, 0, None)


@dataclass(frozen=True)
class Cell:
    """One rollout of the evaluation: a checkpoint in a harness on a task, sample number ``sample``."""

    checkpoint: Checkpoint
    harness: str
    task_id: str
    sample: int

    @property
    def key(self) -> tuple[str, str, str, int]:
        """What identifies the cell in ``results.jsonl`` (a finished key is never run again)."""
        return (self.checkpoint.label, self.harness, self.task_id, self.sample)


def find_checkpoints(run_dir: Path, harnesses: Iterable[str] | None = None) -> list[Checkpoint]:
    """Every checkpoint of the run, ordered by (harness, step); only those of ``harnesses`` when given."""
    found = []
    root = Path(run_dir) / "checkpoints"
    wanted = set(harnesses) if harnesses is not None else None
    for harness_dir in sorted(p for p in root.glob("*") if p.is_dir()):
        if wanted is not None and harness_dir.name not in wanted:
            continue
        for step_dir in harness_dir.iterdir():
            match = _STEP_DIR.match(step_dir.name)
            if match and (step_dir / "adapter" / "adapter_config.json").is_file():
                step = int(match[1])  # the trainer zero-pads: step_000002
                found.append(
                    Checkpoint(f"{harness_dir.name}/step_{step}", harness_dir.name, step, step_dir / "adapter")
                )
    return sorted(found, key=lambda c: (c.trained_harness, c.step))


def select_checkpoints(available: Sequence[Checkpoint], wanted: Sequence[str] | None) -> list[Checkpoint]:
    """The checkpoints named in ``wanted`` (``<harness>/step_<k>``, ``step_<k>`` or ``<k>``), all when None.

    Raises:
        ValueError: A name matches no checkpoint of the run (the message lists those it has).
    """
    if wanted is None:
        return list(available)
    chosen: list[Checkpoint] = []
    for name in wanted:
        harness, _, step = str(name).strip("/").rpartition("/")
        match = _STEP_DIR.match(step) or re.match(r"^(\d+)$", step)
        matches = [c for c in available
                   if match and c.step == int(match[1]) and harness in ("", c.trained_harness)]  # fmt: skip
        if not matches:
            names = ", ".join(c.label for c in available) or "none"
            raise ValueError(f"checkpoint {name!r} is not in the run; it has: {names}")
        chosen += [c for c in matches if c not in chosen]
    return sorted(chosen, key=lambda c: (c.trained_harness, c.step))


def plan_cells(checkpoints: Sequence[Checkpoint], harnesses: Sequence[str], task_ids: Sequence[str], *,
               samples: int, cross_harness: bool) -> list[Cell]:  # fmt: skip
    """Every cell, checkpoint by checkpoint (the base model first), tasks in the given order.

    An adapter runs in its own harness only (none when that harness is not evaluated), or in every harness
    with ``cross_harness``. The base model runs in every harness.
    """
    cells = []
    for checkpoint in [BASE_CHECKPOINT, *checkpoints]:
        own = checkpoint.trained_harness
        if own is None or cross_harness:
            targets = list(harnesses)
        else:
            targets = [own] if own in harnesses else []
        for harness in targets:
            for task_id in task_ids:
                for sample in range(samples):
                    cells.append(Cell(checkpoint, harness, task_id, sample))
    return cells
