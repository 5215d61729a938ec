"""Counts of a folder of tasks by source, difficulty, category and split."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from harness_rl.envs.taskdir import load_task_dirs

FACETS = ("source", "difficulty", "category", "split")


def task_stats(root: Path) -> dict[str, Any]:
    """``{"tasks": N, "source": {...}, "difficulty": {...}, "category": {...}, "split": {...},
    "needs_container": K}`` (each facet maps a value to its count, most common first)."""
    tasks = load_task_dirs(root)
    stats: dict[str, Any] = {"tasks": len(tasks)}
    for facet in FACETS:
        stats[facet] = dict(Counter(getattr(t, facet) or "-" for t in tasks).most_common())
    stats["needs_container"] = sum(t.needs_container for t in tasks)
    return stats


def stats_tables(stats: dict[str, Any]) -> list[Any]:
    """One rich table per facet."""
    from rich.table import Table

    tables = []
    for facet in FACETS:
        table = Table(title=f"{facet} ({stats['tasks']} tasks)")
        table.add_column(facet)
        table.add_column("tasks", justify="right")
        table.add_column("share", justify="right")
        for value, count in stats[facet].items():
            table.add_row(str(value), str(count), f"{count / max(stats['tasks'], 1):.1%}")
        tables.append(table)
    return tables
