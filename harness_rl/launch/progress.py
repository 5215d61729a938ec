"""The live progress display of a training run (rich): steps per harness, rollouts, reward."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

_console = Console(stderr=True)


class TrainingProgress:
    """One bar per harness (optimizer steps), with the latest rollout and reward figures beside it."""

    def __init__(self, harnesses: list[str], max_steps: int):
        self._progress = Progress(
            TextColumn("[bold]{task.fields[harness]:<16}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=_console,
            transient=False,
        )
        self._tasks = {
            name: self._progress.add_task("", total=max_steps, harness=name, status="starting") for name in harnesses
        }
        self._rollouts = dict.fromkeys(harnesses, 0)
        self._solved = dict.fromkeys(harnesses, 0)
        self._lock = threading.Lock()

    def __enter__(self) -> TrainingProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    @staticmethod
    @contextlib.contextmanager
    def status(message: str) -> Iterator[None]:
        """A spinner for one-off waits (engine start, model load)."""
        with _console.status(message):
            yield

    def rollout_done(self, name: str, result: Any) -> None:
        with self._lock:
            self._rollouts[name] += 1
            self._solved[name] += int((result.score or 0) >= 1.0)

    def waiting(self, name: str, taken: int, wanted: int) -> None:
        with self._lock:
            text = f"collecting groups {taken}/{wanted} | rollouts {self._rollouts[name]} solved {self._solved[name]}"
        self._progress.update(self._tasks[name], status=text)

    def training(self, name: str) -> None:
        self._progress.update(self._tasks[name], status="optimizer step")

    def step_done(self, name: str, metrics: dict[str, Any]) -> None:
        text = (
            f"reward {metrics['reward/mean']:.3f} pass {metrics['reward/pass_rate']:.2f} "
            f"loss {metrics['train/loss']:+.4f} -> {metrics['policy/adapter']}"
        )
        self._progress.update(self._tasks[name], advance=1, status=text)
