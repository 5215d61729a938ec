"""The smoke source: the bundled "create a file named F that contains the word W" tasks as task folders.

Splits are fixed by ``data/smoke_tasks.json`` (12 train, 4 heldout); every task is its own dedup group (each
uses a different word and file). The seed only orders the tasks (and so picks which ``n`` are built).
"""

from __future__ import annotations

import hashlib
import random
import shlex
from collections.abc import Iterator
from pathlib import Path

from harness_rl.envs.smoke import INSTRUCTION, SMOKE_DIFFICULTY, SMOKE_TASKS_PATH, read_smoke_entries
from harness_rl.envs.spec import TaskSpec

TEST_SH = """#!/usr/bin/env bash
# Reward 1 when {file} holds the word {word} (whole word, any case); harness_rl's built-in check.
set -euo pipefail
logs="${{HRL_LOGS_DIR:-/logs/verifier}}"
mkdir -p "$logs"
cd "${{HRL_WORKSPACE:-/app}}"
"${{HRL_PYTHON:-python3}}" -I -m harness_rl.envs.checks file_contains --path {qfile} --word {qword} \\
    --reward-file "$logs/reward.json"
"""

SOLVE_SH = """#!/usr/bin/env bash
set -euo pipefail
cd "${{HRL_WORKSPACE:-/app}}"
printf '%s\\n' {qword} > {qfile}
"""


class SmokeBuilder:
    """Builds the smoke tasks (see ``TaskBuilder``).

    Args:
        path: The task list (default: the bundled ``smoke_tasks.json``).
    """

    name = "smoke"
    splits = ("train", "heldout")
    #: Part of the task cache's key: an edited task list builds afresh.
    version = hashlib.sha256(SMOKE_TASKS_PATH.read_bytes()).hexdigest()[:12]

    def __init__(self, path: Path = SMOKE_TASKS_PATH) -> None:
        self.path = Path(path)

    def build(self, *, n: int | None = None, seed: int = 0, split: str | None = None) -> Iterator[TaskSpec]:
        """See ``TaskBuilder.build``."""
        if split is not None and split not in self.splits:
            raise ValueError(f"smoke: split {split!r} is not one of {self.splits}")
        entries = [e for e in read_smoke_entries(self.path) if split is None or e["split"] == split]
        if n is not None and n > len(entries):
            raise ValueError(f"smoke: asked for {n} tasks, the source has {len(entries)}")
        random.Random(seed).shuffle(entries)
        for entry in entries[:n]:
            yield smoke_spec(entry["id"], entry["file"], entry["word"], entry["split"])


def smoke_spec(task_id: str, file: str, word: str, split: str) -> TaskSpec:
    """One smoke task as a TaskSpec."""
    quoted = {"file": file, "word": word, "qfile": shlex.quote(file), "qword": shlex.quote(word)}
    return TaskSpec(
        id=task_id,
        instruction=INSTRUCTION.format(file=file, word=word),
        workspace={},
        tests={"test.sh": TEST_SH.format(**quoted)},
        solution={"solve.sh": SOLVE_SH.format(**quoted)},
        difficulty=SMOKE_DIFFICULTY,
        category="file-write",
        source="smoke",
        split=split,
        group=task_id,
        agent_timeout_s=300.0,
        verifier_timeout_s=60.0,
        tags=("smoke",),
        metadata={"file": file, "word": word},
    )
