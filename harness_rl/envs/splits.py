"""Split hygiene: no dedup group (e.g. one dataset with one question template) may span two splits."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol


class _Splittable(Protocol):
    id: str
    source: str
    split: str
    group: str


class SplitLeakError(ValueError):
    """Some dedup group has tasks in more than one split."""


def check_splits_disjoint(tasks: Iterable[_Splittable]) -> None:
    """Fail when tasks of one ``(source, group)`` lie in different splits (a held-out task with a near twin in
    training); a task with an empty group is its own group. Works on TaskSpecs and Tasks.

    Raises:
        SplitLeakError: Naming up to ten leaking groups with their splits and an example task of each.
    """
    splits: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for task in tasks:
        splits[(task.source, task.group or task.id)].setdefault(task.split, task.id)
    leaks = {key: seen for key, seen in splits.items() if len(seen) > 1}
    if leaks:
        shown = "; ".join(
            f"{source}/{group}: " + ", ".join(f"{split} ({example})" for split, example in sorted(seen.items()))
            for (source, group), seen in sorted(leaks.items())[:10]
        )
        raise SplitLeakError(f"{len(leaks)} dedup group(s) span more than one split: {shown}")
