"""The runtime task: what a rollout is asked to do, what its workspace starts with, and how it is checked.

A task comes either from a Harbor-style task folder (``harness_rl.envs.taskdir.read_task_dir``; the usual
case: its workspace is ``environment/workspace/`` and its verifier ``tests/test.sh``) or is built in memory
(``files`` plus a built-in ``verifier`` kind; kept for plumbing tests and the legacy smoke tasks).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, runtime_checkable

from harness_rl.envs.spec import DIFFICULTIES

#: ``Task.verifier["kind"]`` of a task whose verifier is its folder's ``tests/test.sh``.
TESTS_VERIFIER = "tests"


@dataclass(frozen=True)
class Task:
    """One task.

    Attributes:
        id: Unique, stable id (used in logs, splits and rollout folder names).
        instruction: The text given to the harness.
        verifier: How to score the workspace after the harness exits: ``{"kind": "tests"}`` for a task folder
            (its ``tests/test.sh``), or a built-in kind such as
            ``{"kind": "file_contains", "path": "a.txt", "word": "cat"}`` or
            ``{"kind": "command", "argv": [...], "timeout_s": 30}`` (see ``harness_rl.envs.verify``).
        files: Workspace files to lay out before the harness starts: relative path -> text content (in-memory
            tasks; a task folder's workspace is copied from ``task_dir/environment/workspace``).
        difficulty: "easy", "medium" or "hard"; the task mix weights by it.
        protected_paths: Workspace paths the agent must not delete or modify (task inputs); for the safety
            gate and for reporting, they do not change the score.
        split: Named split ("train", "heldout", ...).
        category: What kind of work ("data-analysis", "bug-fix", ...).
        source: The source that built it ("smoke", "data", "repo", "synthetic", "harbor").
        group: Dedup key: tasks sharing it are always in the same split.
        task_dir: The task folder (None for in-memory tasks).
        agent_timeout_s: The task's own wall-clock limit for the harness (None: the run's budget decides).
        verifier_timeout_s: The task's own limit for its verifier (None: the run's budget decides).
        tags: Free-form labels.
        metadata: Source-specific facts (task.toml ``[harness_rl.source]``).
        needs_container: The task's environment is a container image (an imported Harbor task with only a
            Dockerfile): it cannot run in the local bubblewrap sandbox.
    """

    id: str
    instruction: str
    verifier: Mapping[str, Any] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    difficulty: str = "medium"
    protected_paths: tuple[str, ...] = ()
    split: str = "train"
    category: str = ""
    source: str = ""
    group: str = ""
    task_dir: Path | None = None
    agent_timeout_s: float | None = None
    verifier_timeout_s: float | None = None
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    needs_container: bool = False

    def __post_init__(self) -> None:
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"task {self.id}: difficulty {self.difficulty!r} is not one of {DIFFICULTIES}")

    @property
    def dedup_group(self) -> str:
        """The dedup key (the id when the task names no group)."""
        return self.group or self.id

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Task:
        """Build a task from its JSON/YAML form (unknown keys are an error)."""
        d = dict(d)
        d["protected_paths"] = tuple(d.get("protected_paths", ()))
        d["tags"] = tuple(d.get("tags", ()))
        if d.get("task_dir") is not None:
            d["task_dir"] = Path(d["task_dir"])
        return cls(**d)


@runtime_checkable
class TaskSource(Protocol):
    """A set of tasks; queried once when the rollout worker or the evaluator starts."""

    def tasks(self, split: str | None = None) -> list[Task]:
        """All tasks of ``split`` (all tasks when None)."""
        ...


def lay_out_workspace(task: Task, workspace: Path) -> Path:
    """Create a fresh workspace folder holding exactly the task's starting files.

    Args:
        task: The task: its ``files`` and, for a task folder, a copy of ``environment/workspace/``.
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
        if task.task_dir is not None:
            source = Path(task.task_dir) / "environment" / "workspace"
            if source.is_dir():
                # symlinks stay symlinks: a link in a task's workspace must not pull a host file in
                shutil.copytree(source, workspace, symlinks=True, dirs_exist_ok=True)
        for rel, content in task.files.items():
            target = workspace / safe_relative(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
    except Exception:
        shutil.rmtree(workspace, ignore_errors=True)
        raise
    return workspace


def safe_relative(rel: str) -> Path:
    """``rel`` as a relative path that stays inside its folder.

    Raises:
        ValueError: ``rel`` is empty, absolute or has a ``..`` part.
    """
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"task file path {rel!r} must be relative and stay inside the workspace")
    return Path(*p.parts)
