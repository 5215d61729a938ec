"""The file-write family: "Create a file named F that contains the word W." with hundreds of distinct instances.

The smoke source has 16 fixed tasks, too few to measure held-out learning with a confidence interval. This
family draws many instances of the same kind of task (what SmolLM2-135M solves 10-30% of the time in one step
of mini-swe-agent's text mode, so GRPO groups have reward variance and there is room to improve) and splits
them so that no held-out task shares its word or its file name with a training task:

- each word of ``data/file_write_words.txt`` is in exactly one split, chosen by a hash of the word (stable
  across seeds and machines), ``heldout_fraction`` of them held out;
- file names are built from two disjoint sets of stems (``TRAIN_STEMS``, ``HELDOUT_STEMS``) and ``.txt``.

A task's dedup group is its word, so ``check_splits_disjoint`` guards the split like any other source's.
The verifier and oracle are the smoke tasks' (``file_contains``, whole word, any case).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

from harness_rl.envs.sources.smoke import smoke_spec
from harness_rl.envs.spec import TaskSpec

WORDS_PATH = Path(__file__).resolve().parent.parent / "data" / "file_write_words.txt"

#: File-name stems of each split (disjoint, so a held-out task's file name was never seen in training).
TRAIN_STEMS = ("notes", "out", "data", "word", "result", "answer", "output", "memo", "draft", "entry")
HELDOUT_STEMS = ("record", "report", "message", "text", "page", "item", "list", "log", "hello", "file")
#: Only .txt, like the harness prompt's one-shot example: with .md and .log names the base model solved 9% of
#: sampled replies against 35% with .txt (direct engine probe, 96 samples at temperature 0.8), too few groups
#: with reward variance for a dozen GRPO steps.
EXTENSIONS = (".txt",)


def read_words(path: Path = WORDS_PATH) -> list[str]:
    """The vocabulary, one lower-case word per line.

    Raises:
        ValueError: A line is not a single lower-case word, or a word repeats.
    """
    words = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    bad = [w for w in words if not (w.isalpha() and w.islower())]
    if bad:
        raise ValueError(f"{path}: not single lower-case words: {bad[:5]}")
    if len(set(words)) != len(words):
        raise ValueError(f"{path}: repeated words")
    return words


def word_split(word: str, heldout_fraction: float) -> str:
    """The split a word belongs to: a hash of the word, so adding words never moves an existing one."""
    bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") / 2**32
    return "heldout" if bucket < heldout_fraction else "train"


class FileWriteBuilder:
    """Builds the file-write tasks (see ``TaskBuilder``): one task per word of the vocabulary.

    Args:
        heldout_fraction: Share of the words held out (0 < f < 1).
        words_path: The vocabulary file.
    """

    name = "file_write"
    splits = ("train", "heldout")
    #: Part of the task cache's key (with the options and this module's code): another vocabulary builds afresh.
    version = hashlib.sha256(WORDS_PATH.read_bytes()).hexdigest()[:12]

    def __init__(self, heldout_fraction: float = 0.3, words_path: Path = WORDS_PATH) -> None:
        if not 0.0 < heldout_fraction < 1.0:
            raise ValueError(f"file_write: heldout_fraction must be in (0, 1), got {heldout_fraction}")
        self.heldout_fraction = heldout_fraction
        self.words_path = Path(words_path)

    def build(self, *, n: int | None = None, seed: int = 0, split: str | None = None) -> Iterator[TaskSpec]:
        """See ``TaskBuilder.build``. The seed picks each task's file name and the order (hence which ``n``)."""
        if split is not None and split not in self.splits:
            raise ValueError(f"file_write: split {split!r} is not one of {self.splits}")
        rng = random.Random(seed)
        tasks = []
        for word in read_words(self.words_path):
            word_split_name = word_split(word, self.heldout_fraction)
            stems = HELDOUT_STEMS if word_split_name == "heldout" else TRAIN_STEMS
            file = rng.choice(stems) + rng.choice(EXTENSIONS)  # drawn for every word: ids do not depend on split
            if split is None or word_split_name == split:
                tasks.append((word, file, word_split_name))
        if n is not None and n > len(tasks):
            raise ValueError(f"file_write: asked for {n} tasks, the source has {len(tasks)} (split={split})")
        rng.shuffle(tasks)
        for word, file, split_name in tasks[:n]:
            spec = smoke_spec(f"file-write-{word}", file, word, split_name)
            yield dataclasses.replace(spec, source=self.name, group=word, tags=("file_write",))
