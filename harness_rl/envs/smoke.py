"""The bundled smoke tasks: "Create a file named F that contains the word W." in several variants.

These are the tasks SmolLM2-135M solves 10-40% of the time in mini-swe-agent text mode (what gives a GRPO
group reward variance on CPU); harder tasks (counting, summing, copying) stay at about 0.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness_rl.envs.task import Task

SMOKE_TASKS_PATH = Path(__file__).parent / "data" / "smoke_tasks.json"

INSTRUCTION = "Create a file named {file} that contains the word {word}."


def smoke_task(task_id: str, file: str, word: str, *, split: str = "train") -> Task:
    """One "create a file named F that contains the word W" task."""
    return Task(
        id=task_id,
        instruction=INSTRUCTION.format(file=file, word=word),
        verifier={"kind": "file_contains", "path": file, "word": word},
        difficulty=0.75,
        split=split,
    )


class SmokeTaskSource:
    """The smoke task set from ``data/smoke_tasks.json`` (or another file of the same shape)."""

    def __init__(self, path: Path = SMOKE_TASKS_PATH) -> None:
        spec = json.loads(Path(path).read_text())
        self._tasks = [smoke_task(t["id"], t["file"], t["word"], split=t.get("split", "train")) for t in spec]
        ids = [t.id for t in self._tasks]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate task ids in {path}")

    def tasks(self, split: str | None = None) -> list[Task]:
        """See ``TaskSource.tasks``."""
        return [t for t in self._tasks if split is None or t.split == split]


def load_smoke_tasks(split: str | None = None) -> list[Task]:
    """The bundled smoke tasks of ``split`` (all when None)."""
    return SmokeTaskSource().tasks(split)
