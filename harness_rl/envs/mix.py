"""Task mixes: which sources a run draws from, how often, at which difficulties, from which split.

A mix (the ``tasks`` config group, ``conf/tasks/*.yaml``) lists sources, each with a weight and either a built
folder or the build options to build it into the task cache on first use. A task's draw probability is

    P(task) = w_source / sum(w_sources) * w_difficulty(task) / sum(w_difficulty over the source's tasks)

so a source's weight is the share of draws it gets, and within it the difficulty weights shift draws towards
(e.g.) medium and hard tasks without a source with many easy tasks crowding out the others.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_rl.envs.build import ensure_built
from harness_rl.envs.spec import DIFFICULTIES
from harness_rl.envs.splits import check_splits_disjoint
from harness_rl.envs.task import Task
from harness_rl.envs.taskdir import load_task_dirs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceMix:
    """One source of a mix.

    Attributes:
        name: The source (a key of ``harness_rl.envs.sources.BUILDERS``, or any name when ``folder`` is set).
        weight: Its share of the draws (relative to the other sources).
        folder: A folder of built task folders; None: build into the task cache on first use.
        n: Build at most this many tasks (all when None).
        seed: The build seed (fixes ids and splits).
        options: The builder's constructor options.
    """

    name: str
    weight: float = 1.0
    folder: str | None = None
    n: int | None = None
    seed: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskMix:
    """A run's task mix (see the module docstring).

    Attributes:
        sources: The sources.
        split: The split drawn from ("train" for training).
        difficulty_weights: Weight of each difficulty label within a source.
        check_disjoint: Refuse sources whose dedup groups span splits.
    """

    sources: tuple[SourceMix, ...]
    split: str = "train"
    difficulty_weights: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(DIFFICULTIES, 1.0))
    check_disjoint: bool = True

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("a task mix needs at least one source")
        unknown = set(self.difficulty_weights) - set(DIFFICULTIES)
        if unknown:
            raise ValueError(f"difficulty_weights: unknown labels {sorted(unknown)}; use {DIFFICULTIES}")
        weights = [*self.difficulty_weights.values(), *(s.weight for s in self.sources)]
        if any(w < 0 for w in weights):
            raise ValueError(f"task mix weights must be >= 0, got {weights}")

    @classmethod
    def from_config(cls, cfg: Any) -> TaskMix:
        """The mix of a ``tasks`` config node (a DictConfig or a plain mapping)."""
        from omegaconf import DictConfig, OmegaConf

        data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
        sources = tuple(SourceMix(**s) for s in data["sources"])
        weights = dict.fromkeys(DIFFICULTIES, 1.0) | dict(data.get("difficulty_weights") or {})
        return cls(sources, data.get("split", "train"), weights, bool(data.get("check_disjoint", True)))


def source_folder(source: SourceMix, cache_dir: Path) -> Path:
    """Where ``source``'s task folders are: its ``folder``, or its cached build (built now if missing)."""
    if source.folder is not None:
        return Path(source.folder).expanduser()
    return ensure_built(source.name, cache_dir, n=source.n, seed=source.seed, options=source.options)


def load_mix(mix: TaskMix, cache_dir: Path) -> tuple[list[Task], list[float]]:
    """The tasks of ``mix.split`` from every source, with their draw weights.

    Tasks that need a container (imported Harbor tasks with only a Dockerfile) are left out with a warning:
    the local sandbox cannot run them.

    Raises:
        ValueError: No source has a task of the split, a source's groups span splits, or two sources share
            a task id.
    """
    tasks: list[Task] = []
    weights: list[float] = []
    total_source_weight = sum(s.weight for s in mix.sources) or 1.0
    for source in mix.sources:
        folder = source_folder(source, cache_dir)
        every = load_task_dirs(folder)
        if mix.check_disjoint:
            check_splits_disjoint(every)
        chosen = [t for t in every if t.split == mix.split]
        container = [t for t in chosen if t.needs_container]
        if container:
            log.warning("source %s: leaving out %d task(s) that need a container (e.g. %s)",
                        source.name, len(container), container[0].id)  # fmt: skip
            chosen = [t for t in chosen if not t.needs_container]
        if not chosen:
            log.warning("source %s (%s) has no runnable task of split %r", source.name, folder, mix.split)
            continue
        by_task = [float(mix.difficulty_weights[t.difficulty]) for t in chosen]
        within = sum(by_task)
        if within == 0:
            log.warning("source %s: every task of split %r has difficulty weight 0", source.name, mix.split)
            continue
        tasks += chosen
        weights += [source.weight / total_source_weight * w / within for w in by_task]
    if not tasks:
        raise ValueError(f"the task mix has no runnable task of split {mix.split!r}")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise ValueError(f"task ids appear in more than one source of the mix: {dup}")
    return tasks, weights
