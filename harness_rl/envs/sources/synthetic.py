"""The "synthetic" task source: environments generated from agent trajectories.

Each trajectory of a corpus (chat-format logs, Harbor ATIF files, this project's rollout folders; see
``synthetic_trajectory``) is replayed from its starting workspace and yields up to four kinds of task
(``synthetic_types``): a question its tool outputs answer, its final workspace state, a failed command to make
succeed, and that state under a tool-call budget. A candidate is kept only if its oracle scores 1.0 and the
untouched workspace scores less, checked by running both while building.

Splits: "train" and "heldout", by source trajectory (every task of one trajectory lands in one split, so no
held-out task has a twin in training); which trajectories are held out depends only on the seed and their ids.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cache
from pathlib import Path

from harness_rl.envs.sources.synthetic_replay import keep
from harness_rl.envs.sources.synthetic_trajectory import Decoder, chatml_decoder, load_corpus
from harness_rl.envs.sources.synthetic_types import KINDS, generate
from harness_rl.envs.spec import TaskSpec
from harness_rl.sandbox.base import Sandbox

log = logging.getLogger(__name__)

CORPUS_DIR = Path(__file__).resolve().parents[1] / "data" / "trajectories"
SPLITS = ("train", "heldout")
#: Address-space cap of replayed commands and task scripts (Python with pandas reserves a lot of virtual memory).
SCRIPT_ADDRESS_SPACE_BYTES = 8 << 30


def _rank(seed: int, key: str) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def assign_splits(groups: list[str], seed: int, heldout_fraction: float) -> dict[str, str]:
    """Group -> split: the groups ranked by a seeded hash, the first ``heldout_fraction`` of them (at least one
    when there are two or more) held out. Same seed and groups -> same assignment on any machine."""
    ranked = sorted(set(groups), key=lambda g: _rank(seed, g))
    n_heldout = round(heldout_fraction * len(ranked))
    if len(ranked) >= 2 and heldout_fraction > 0:
        n_heldout = min(max(n_heldout, 1), len(ranked) - 1)
    return {g: ("heldout" if k < n_heldout else "train") for k, g in enumerate(ranked)}


#: Parallel replays and task checks: the work is bash subprocesses, so threads suffice (the GIL is not the limit).
WORKERS = min(8, os.cpu_count() or 2)


class _Corpus:
    """One corpus's candidates and their keep verdicts, shared by every build of this process: replaying and
    checking are the slow part and depend on neither seed nor split, and each candidate is checked only when
    a build first reaches it (``build(n=12)`` checks about 12, not all)."""

    def __init__(self, folder: Path, tokenizer: str | None, sandboxed: bool) -> None:
        self.sandbox: Sandbox | None = None
        if sandboxed:
            from harness_rl.sandbox.local import LocalSandbox

            self.sandbox = LocalSandbox(address_space_bytes=SCRIPT_ADDRESS_SPACE_BYTES)
        decoder: Decoder | None = None
        if tokenizer is not None:
            from transformers import AutoTokenizer

            decoder = chatml_decoder(AutoTokenizer.from_pretrained(tokenizer))
        trajectories = load_corpus(folder, decoder)
        self.trajectory_ids = tuple(t.id for t in trajectories)
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            generated = pool.map(lambda t: generate(t, self.sandbox), trajectories)
            self.candidates = tuple(spec for specs in generated for spec in specs)
        self._verdicts: dict[str, bool] = {}
        self._lock = threading.Lock()

    def kept(self, specs: list[TaskSpec]) -> Iterator[TaskSpec]:
        """``specs`` that pass the keep rule, in order, checking a batch of not yet checked ones at a time."""
        for start in range(0, len(specs), WORKERS):
            batch = specs[start : start + WORKERS]
            with self._lock:
                todo = [spec for spec in batch if spec.id not in self._verdicts]
            if todo:
                with ThreadPoolExecutor(max_workers=WORKERS) as pool:
                    verdicts = list(pool.map(lambda spec: keep(spec, self.sandbox), todo))
                with self._lock:
                    for spec, verdict in zip(todo, verdicts, strict=True):
                        self._verdicts[spec.id] = verdict
                        if not verdict:
                            log.info("synthetic: dropped %s (its oracle fails or the empty attempt passes)", spec.id)
            yield from (spec for spec in batch if self._verdicts[spec.id])


@cache
def _corpus(folder: Path, tokenizer: str | None, sandboxed: bool) -> _Corpus:
    return _Corpus(folder, tokenizer, sandboxed)


class SyntheticBuilder:
    """Builds the synthetic tasks of a trajectory corpus.

    Args:
        trajectories: The corpus folder (default: the bundled ``envs/data/trajectories``).
        heldout_fraction: Share of source trajectories whose tasks form the "heldout" split.
        tokenizer: Hugging Face tokenizer name or path for decoding rollout traces of a ChatML model (the
            scripted fake engine's traces need none).
        sandboxed: Replay trajectories and run task scripts in this project's sandbox (bubblewrap when usable:
            the host read-only, only the temporary folders writable). Off only for trusted corpora.
        kinds: The task types to build (default all of ``synthetic_types.KINDS``: qa, state, fix, budget).
    """

    name = "synthetic"
    splits = SPLITS

    def __init__(
        self,
        trajectories: Path | str | None = None,
        heldout_fraction: float = 0.25,
        tokenizer: str | None = None,
        sandboxed: bool = True,
        kinds: tuple[str, ...] = KINDS,
    ) -> None:
        if unknown := set(kinds) - set(KINDS):
            raise ValueError(f"unknown synthetic task kinds {sorted(unknown)}; choose from {KINDS}")
        self.kinds = tuple(kinds)
        self.trajectories = Path(trajectories or CORPUS_DIR).resolve()
        self.sandboxed = sandboxed
        self.heldout_fraction = heldout_fraction
        self.tokenizer = tokenizer

    def build(self, *, n: int | None = None, seed: int = 0, split: str | None = None) -> Iterator[TaskSpec]:
        """See ``TaskBuilder.build``; tasks come in a seeded order. Candidates are checked lazily, so when fewer
        than ``n`` of them pass, the ValueError comes after the ones that did."""
        if split is not None and split not in SPLITS:
            raise ValueError(f"split {split!r} is not one of {SPLITS}")
        corpus = _corpus(self.trajectories, self.tokenizer, self.sandboxed)
        # Splits are drawn over all trajectories, not only those that keep a task, so a trajectory losing its
        # tasks on another machine (a tool printing differently) cannot move any other trajectory's tasks.
        splits = assign_splits(list(corpus.trajectory_ids), seed, self.heldout_fraction)
        tasks = [replace(c, split=splits[c.group]) for c in corpus.candidates]
        tasks = [t for t in tasks if (split is None or t.split == split) and t.metadata["type"] in self.kinds]
        tasks.sort(key=lambda t: _rank(seed, t.id))
        if n is not None and n > len(tasks):
            raise ValueError(f"asked for {n} synthetic tasks, the corpus has {len(tasks)} candidates")
        made = 0
        for task in corpus.kept(tasks):
            if n is not None and made == n:
                return
            yield task
            made += 1
        if n is not None and made < n:
            raise ValueError(f"asked for {n} synthetic tasks, the corpus yields {made}")
