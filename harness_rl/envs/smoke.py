"""The bundled smoke tasks: "Create a file named F that contains the word W." in several variants.

These are the tasks SmolLM2-135M solves 10-40% of the time in mini-swe-agent text mode (what gives a GRPO
group reward variance on CPU); harder tasks (counting, summing, copying) stay at about 0. Training reads them
as task folders built by ``harness_rl.envs.sources.smoke``; ``smoke_task`` builds one in memory (with the
built-in ``file_contains`` verifier) for plumbing tests.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness_rl.envs.task import Task

SMOKE_TASKS_PATH = Path(__file__).parent / "data" / "smoke_tasks.json"

INSTRUCTION = "Create a file named {file} that contains the word {word}."

#: Absolute difficulty of the smoke tasks (trivial for any real model; the 135M model solves them sometimes).
SMOKE_DIFFICULTY = "easy"


def read_smoke_entries(path: Path = SMOKE_TASKS_PATH) -> list[dict[str, str]]:
    """The entries of ``smoke_tasks.json``: id, file, word, split.

    Raises:
        ValueError: Two entries share an id.
    """
    entries = json.loads(Path(path).read_text())
    ids = [e["id"] for e in entries]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate task ids in {path}")
    return entries


def smoke_task(task_id: str, file: str, word: str, *, split: str = "train") -> Task:
    """One in-memory "create a file named F that contains the word W" task."""
    return Task(
        id=task_id,
        instruction=INSTRUCTION.format(file=file, word=word),
        verifier={"kind": "file_contains", "path": file, "word": word},
        difficulty=SMOKE_DIFFICULTY,
        split=split,
        category="file-write",
        source="smoke",
        group=task_id,
    )


class SmokeTaskSource:
    """The smoke task set in memory, from ``data/smoke_tasks.json`` (or another file of the same shape)."""

    def __init__(self, path: Path = SMOKE_TASKS_PATH) -> None:
        self._tasks = [
            smoke_task(e["id"], e["file"], e["word"], split=e.get("split", "train")) for e in read_smoke_entries(path)
        ]

    def tasks(self, split: str | None = None) -> list[Task]:
        """See ``TaskSource.tasks``."""
        return [t for t in self._tasks if split is None or t.split == split]


def load_smoke_tasks(split: str | None = None) -> list[Task]:
    """The bundled smoke tasks of ``split`` (all when None), in memory."""
    return SmokeTaskSource().tasks(split)
