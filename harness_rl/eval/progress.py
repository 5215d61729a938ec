"""The live progress display of an evaluation (rich): cells done, solved and unscorable per checkpoint."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

_console = Console(stderr=True)


class EvalProgressBar:
    """One bar for the whole plan and one per checkpoint evaluated (see ``runner.EvalProgress``)."""

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.fields[label]:<28}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=_console,
        )
        self._overall: Any = None
        self._current: Any = None
        self._counts = {"solved": 0, "unscorable": 0, "done": 0}

    def __enter__(self) -> EvalProgressBar:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def start(self, total: int, done: int) -> None:
        self._overall = self._progress.add_task("", total=total, completed=done, label="all cells",
                                                status=f"{done} already done")  # fmt: skip

    def checkpoint(self, label: str, cells: int) -> None:
        self._counts = {"solved": 0, "unscorable": 0, "done": 0}
        self._current = self._progress.add_task("", total=cells, label=label, status="loading adapter")

    def cell_done(self, record: dict[str, Any]) -> None:
        counts = self._counts
        counts["done"] += 1
        counts["solved"] += int(bool(record.get("solved")))
        counts["unscorable"] += int(record.get("unscorable") is not None)
        status = f"solved {counts['solved']}/{counts['done']} unscorable {counts['unscorable']}"
        self._progress.update(self._current, advance=1, status=status)
        self._progress.update(self._overall, advance=1, status="")

    @staticmethod
    def status(message: str) -> Any:
        """A spinner for one-off waits (engine start)."""
        return _console.status(message)
