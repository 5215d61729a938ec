"""Runs an evaluation's cells checkpoint by checkpoint, in parallel within a checkpoint, resumably.

The runner knows nothing of engines or harnesses: ``open_pool(checkpoint)`` gives it a ``CellPool`` that runs
one cell (the real one loads the adapter and owns a sandbox; tests pass scripted ones). Every finished cell is
appended to the results store at once, so an interrupted evaluation loses only the cells in flight.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from itertools import groupby
from typing import Any, Protocol

from harness_rl.eval.plan import Cell, Checkpoint
from harness_rl.eval.results import ResultsStore

log = logging.getLogger(__name__)


class CellPool(Protocol):
    """Runs the cells of one checkpoint (one sandbox pool, one adapter loaded)."""

    def run(self, cell: Cell) -> dict[str, Any]:
        """Run one cell and return its result record; called from worker threads, several at once."""

    def abort(self) -> None:
        """Stop every cell in flight at once; called from the main thread on an error or Ctrl-C."""


class EvalProgress(Protocol):
    """What the runner reports to a progress display."""

    def start(self, total: int, done: int) -> None:
        """Called once, before the first cell, with the number of cells planned and already finished."""

    def checkpoint(self, label: str, cells: int) -> None:
        """Called when a checkpoint's pool opens, with the number of its cells still to run."""

    def cell_done(self, record: dict[str, Any]) -> None:
        """Called in the main thread after each finished cell was stored."""


class _NoProgress:
    def start(self, total: int, done: int) -> None:
        pass

    def checkpoint(self, label: str, cells: int) -> None:
        pass

    def cell_done(self, record: dict[str, Any]) -> None:
        pass


def pending_cells(cells: Sequence[Cell], store: ResultsStore) -> list[Cell]:
    """The cells of the plan whose results are not stored yet, in plan order."""
    return [cell for cell in cells if cell.key not in store.done]


def run_cells(
    cells: Sequence[Cell],
    store: ResultsStore,
    open_pool: Callable[[Checkpoint], AbstractContextManager[CellPool]],
    *,
    max_sessions: int,
    progress: EvalProgress | None = None,
) -> int:
    """Run every cell of ``cells`` not already in ``store``; returns how many ran.

    Checkpoints are taken one at a time, in plan order (a pool is opened only for a checkpoint with cells
    left); within one, up to ``max_sessions`` cells run at once.

    Raises:
        Whatever a cell or ``open_pool`` raised, and KeyboardInterrupt; the cells finished before it are stored.
    """
    progress = progress or _NoProgress()
    todo = pending_cells(cells, store)
    progress.start(len(cells), len(cells) - len(todo))
    log.info("%d of %d cells to run (%d already in %s)", len(todo), len(cells), len(cells) - len(todo), store.path)
    ran = 0
    for checkpoint, group in groupby(todo, key=lambda c: c.checkpoint):
        batch = list(group)
        progress.checkpoint(checkpoint.label, len(batch))
        with open_pool(checkpoint) as pool:
            ran += _run_batch(batch, pool, store, max_sessions, progress)
    return ran


def _run_batch(batch: list[Cell], pool: CellPool, store: ResultsStore, max_sessions: int,
               progress: EvalProgress) -> int:  # fmt: skip
    executor = ThreadPoolExecutor(max(1, max_sessions), thread_name_prefix="eval")
    futures: set[Future] = {executor.submit(pool.run, cell) for cell in batch}
    ran = 0
    try:
        while futures:
            # A timeout lets Ctrl-C reach the main thread between waits.
            finished, futures = wait(futures, timeout=1.0, return_when=FIRST_COMPLETED)
            # Store every cell that finished before raising a failed one's error, so none of them reruns.
            failed = [f for f in finished if f.exception() is not None]
            for future in finished:
                if future.exception() is None:
                    record = future.result()
                    store.append(record)
                    progress.cell_done(record)
                    ran += 1
            if failed:
                failed[0].result()
    except BaseException:
        # Order matters: drop the queued cells, kill the harnesses in flight, then wait for their threads.
        executor.shutdown(wait=False, cancel_futures=True)
        pool.abort()
        executor.shutdown(wait=True)
        raise
    executor.shutdown(wait=True)
    return ran
