"""Task folders on disk: write a TaskSpec as a Harbor-style folder, read folders back as runtime Tasks.

``task.toml`` is Harbor's (``version``, ``[metadata]``, ``[verifier]``, ``[agent]``) plus our own table:

    version = "1.0"
    [metadata]
    difficulty = "easy"            # easy / medium / hard
    category = "data-analysis"
    tags = ["pandas"]
    author_name = "harness-rl"
    [verifier]
    timeout_sec = 120.0
    [agent]
    timeout_sec = 600.0
    [harness_rl]
    source = "data"
    split = "train"
    group = "iris/mean-by-group"
    protected_paths = ["data.csv"]
    needs_container = false        # true: the environment is a Dockerfile only (imported Harbor task)
    [harness_rl.metadata]          # the source's own facts (dataset, template, project, ...)

(The source's facts are ``[harness_rl.metadata]``, not ``[harness_rl.source]``: TOML cannot hold both the key
``harness_rl.source`` (the source name) and a table of that name.)

Every task folder read is hidden from the sandboxes of this process (``hide_from_sandboxes``), so an agent
never sees its tests/ or solution/ through the host filesystem.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

from harness_rl.envs.spec import DIFFICULTIES, TaskSpec
from harness_rl.envs.task import TESTS_VERIFIER, Task, safe_relative
from harness_rl.sandbox.base import hide_from_sandboxes

#: A task id is a folder name: lower-case letters, digits, dot, underscore and dash, not starting with a dot.
TASK_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,199}")

TASK_TOML = "task.toml"
INSTRUCTION_MD = "instruction.md"
TASK_TOML_VERSION = "1.0"
AUTHOR_NAME = "harness-rl"


class TaskFormatError(ValueError):
    """A task folder (or TaskSpec) breaks the format; the message names the file and the field."""


def check_task_id(task_id: str) -> str:
    """``task_id`` if it is a safe folder name.

    Raises:
        TaskFormatError: It is not (``[a-z0-9][a-z0-9._-]*``, at most 200 characters).
    """
    if not isinstance(task_id, str) or not TASK_ID_PATTERN.fullmatch(task_id):
        raise TaskFormatError(f"task id {task_id!r} is not a safe folder name ([a-z0-9][a-z0-9._-]*, <= 200 chars)")
    return task_id


def task_toml(spec: TaskSpec, *, needs_container: bool = False) -> dict[str, Any]:
    """The ``task.toml`` content of ``spec`` as a dict (see the module docstring)."""
    return {
        "version": TASK_TOML_VERSION,
        "metadata": {
            "difficulty": spec.difficulty,
            "category": spec.category,
            "tags": list(spec.tags),
            "author_name": AUTHOR_NAME,
        },
        "verifier": {"timeout_sec": float(spec.verifier_timeout_s)},
        "agent": {"timeout_sec": float(spec.agent_timeout_s)},
        "harness_rl": {
            "source": spec.source,
            "split": spec.split,
            "group": spec.group,
            "protected_paths": list(spec.protected_paths),
            "needs_container": needs_container,
            "metadata": dict(spec.metadata),
        },
    }


def write_task_dir(
    spec: TaskSpec,
    out_root: Path,
    *,
    overwrite: bool = False,
    needs_container: bool = False,
    extra_files: Mapping[str, str | bytes] | None = None,
    extra_toml: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``spec`` as the folder ``out_root/<spec.id>``, atomically.

    The folder is written beside its final place and renamed into it, so a reader (or a crash) never sees a
    half-written task.

    Args:
        spec: The task.
        out_root: The folder of task folders (created if missing).
        overwrite: Replace an existing folder of the same id (else it is an error).
        needs_container: Mark the task as runnable only in a container (Harbor import).
        extra_files: Further files, folder-relative (e.g. ``environment/Dockerfile``).
        extra_toml: Further top-level task.toml tables (e.g. Harbor's ``[environment]``); ours win on clashes.

    Returns:
        The task folder.

    Raises:
        TaskFormatError: The id is not a safe folder name, a file path leaves its folder, or the metadata is not
            TOML-serialisable.
        FileExistsError: The folder exists and ``overwrite`` is False.
    """
    check_task_id(spec.id)
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    final = out_root / spec.id
    if final.exists() and not overwrite:
        raise FileExistsError(f"task folder {final} exists (pass overwrite=True to replace it)")
    try:
        toml_text = tomli_w.dumps({**dict(extra_toml or {}), **task_toml(spec, needs_container=needs_container)})
    except (TypeError, ValueError) as err:
        raise TaskFormatError(f"task {spec.id}: {TASK_TOML}: metadata is not TOML-serialisable: {err}") from err
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.id}.", dir=out_root))
    try:
        (tmp / INSTRUCTION_MD).write_text(spec.instruction, encoding="utf-8")
        (tmp / TASK_TOML).write_text(toml_text, encoding="utf-8")
        _write_files(tmp / "environment" / "workspace", spec.workspace, spec.id, "workspace")
        _write_files(tmp / "tests", spec.tests, spec.id, "tests")
        _write_files(tmp / "solution", spec.solution, spec.id, "solution")
        _write_files(tmp, extra_files or {}, spec.id, "extra files")
        for script in (tmp / "tests" / "test.sh", tmp / "solution" / "solve.sh"):
            script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        tmp.chmod(0o755)  # mkdtemp makes it 0700
        if final.exists():
            # A folder cannot be renamed over a non-empty one: move the old one aside first, then drop it.
            trash = Path(tempfile.mkdtemp(prefix=f".{spec.id}.old.", dir=out_root))
            os.replace(final, trash / "old")
            os.replace(tmp, final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _write_files(root: Path, files: Mapping[str, str | bytes], task_id: str, what: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        try:
            target = root / safe_relative(rel)
        except ValueError as err:
            raise TaskFormatError(f"task {task_id}: {what}: {err}") from err
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")


def read_task_dir(path: Path, *, hide: bool = True) -> Task:
    """Read one task folder as a runtime Task (whose verifier is its ``tests/test.sh``).

    Args:
        path: The task folder.
        hide: Register the folder with ``hide_from_sandboxes`` (``load_task_dirs`` hides the whole root).

    Raises:
        TaskFormatError: A file is missing or a field is missing or has the wrong type (the message names both).
    """
    path = Path(path).resolve()
    toml_path = path / TASK_TOML
    for required in (toml_path, path / INSTRUCTION_MD, path / "tests" / "test.sh"):
        if not required.is_file():
            raise TaskFormatError(f"{required}: missing")
    try:
        doc = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise TaskFormatError(f"{toml_path}: not valid TOML: {err}") from err
    fields = _Fields(toml_path, doc)
    task_id = path.name
    try:
        check_task_id(task_id)
    except TaskFormatError as err:
        raise TaskFormatError(f"{path}: {err}") from err
    difficulty = fields.get("metadata.difficulty", str)
    if difficulty not in DIFFICULTIES:
        raise TaskFormatError(f"{toml_path}: metadata.difficulty: {difficulty!r} is not one of {DIFFICULTIES}")
    protected = fields.get("harness_rl.protected_paths", list, default=[])
    for rel in protected:
        if not isinstance(rel, str):
            raise TaskFormatError(f"{toml_path}: harness_rl.protected_paths: {rel!r} is not a string")
    task = Task(
        id=task_id,
        instruction=(path / INSTRUCTION_MD).read_text(encoding="utf-8"),
        verifier={"kind": TESTS_VERIFIER},
        difficulty=difficulty,
        protected_paths=tuple(protected),
        split=fields.get("harness_rl.split", str),
        category=fields.get("metadata.category", str, default=""),
        source=fields.get("harness_rl.source", str),
        group=fields.get("harness_rl.group", str, default=""),
        task_dir=path,
        agent_timeout_s=fields.get("agent.timeout_sec", (int, float), default=None),
        verifier_timeout_s=fields.get("verifier.timeout_sec", (int, float), default=None),
        tags=tuple(str(t) for t in fields.get("metadata.tags", list, default=[])),
        metadata=fields.get("harness_rl.metadata", dict, default={}),
        needs_container=fields.get("harness_rl.needs_container", bool, default=False),
    )
    if hide:
        hide_from_sandboxes(path)
    return task


def load_task_dirs(root: Path, split: str | None = None) -> list[Task]:
    """Every task folder directly under ``root`` (sorted by id), of ``split`` when given.

    ``root`` is hidden from the sandboxes of this process. Folders whose name starts with a dot (a write in
    progress) are skipped.

    Raises:
        FileNotFoundError: ``root`` is not a folder.
        TaskFormatError: A folder is not a valid task (the first one found, named with its file and field).
    """
    root = Path(root).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"task folder root {root} does not exist")
    hide_from_sandboxes(root)
    tasks = []
    for child in sorted(root.iterdir()):
        if child.name.startswith(".") or not child.is_dir():
            continue
        task = read_task_dir(child, hide=False)
        if split is None or task.split == split:
            tasks.append(task)
    return tasks


class _Fields:
    """Typed access to dotted fields of a parsed task.toml, with errors naming the file and the field."""

    _MISSING = object()

    def __init__(self, path: Path, doc: dict[str, Any]) -> None:
        self.path = path
        self.doc = doc

    def get(self, dotted: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
        node: Any = self.doc
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                if default is self._MISSING:
                    raise TaskFormatError(f"{self.path}: {dotted}: missing")
                return default
            node = node[part]
        # bool is an int subclass: a timeout of `true` must not pass as 1 second
        if not isinstance(node, kind) or (isinstance(node, bool) and kind is not bool):
            raise TaskFormatError(f"{self.path}: {dotted}: expected {_kind_name(kind)}, got {node!r}")
        return node


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)
