"""The task format: what a rollout is asked to do, what its workspace starts with, and how it is checked."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Task:
    """One task.

    Attributes:
        id: Unique, stable id (used in logs, splits and rollout folder names).
        instruction: The text given to the harness.
        files: Workspace files to lay out before the harness starts: relative path -> text content.
        verifier: How to score the workspace after the harness exits, e.g.
            ``{"kind": "file_contains", "path": "a.txt", "word": "cat"}`` or
            ``{"kind": "command", "argv": [...], "timeout_s": 30}`` (see ``harness_rl.envs.verify``).
        difficulty: Estimated failure rate in [0, 1] of the target model (0 = always solved); task samplers
            may weight by it.
        protected_paths: Workspace paths the agent must not delete or modify (task inputs); for the safety
            gate and for reporting, they do not change the score.
        split: "train" or "eval" (held-out).
    """

    id: str
    instruction: str
    verifier: Mapping[str, Any]
    files: Mapping[str, str] = field(default_factory=dict)
    difficulty: float = 0.5
    protected_paths: tuple[str, ...] = ()
    split: str = "train"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Task:
        """Build a task from its JSON/YAML form (unknown keys are an error)."""
        d = dict(d)
        d["protected_paths"] = tuple(d.get("protected_paths", ()))
        return cls(**d)


@runtime_checkable
class TaskSource(Protocol):
    """A set of tasks; queried once when the rollout worker or the evaluator starts."""

    def tasks(self, split: str | None = None) -> list[Task]:
        """All tasks of ``split`` (all tasks when None)."""
        ...


def lay_out_workspace(task: Task, workspace: Path) -> Path:
    """Create a fresh workspace folder holding exactly the task's files.

    Args:
        task: The task whose files to write.
        workspace: Folder to create; it must not exist yet or be empty (a reused folder could carry a
            previous rollout's output into the score).

    Returns:
        The resolved workspace path.

    Raises:
        FileExistsError: The folder exists and is not empty.
        ValueError: A task file path is absolute or leaves the workspace.
    """
    workspace = Path(workspace)
    if workspace.exists() and any(workspace.iterdir()):
        raise FileExistsError(f"workspace {workspace} is not empty")
    workspace.mkdir(parents=True, exist_ok=True)
    workspace = workspace.resolve()
    try:
        for rel, content in task.files.items():
            target = workspace / _safe_relative(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
    except Exception:
        shutil.rmtree(workspace, ignore_errors=True)
        raise
    return workspace


def _safe_relative(rel: str) -> Path:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"task file path {rel!r} must be relative and stay inside the workspace")
    return Path(*p.parts)
