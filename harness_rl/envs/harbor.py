"""Harbor interchange: import Harbor task folders as ours, export ours as Harbor task folders.

Harbor's folder is ``instruction.md``, ``task.toml`` (``[metadata]``, ``[verifier]``, ``[agent]``,
``[environment]``), ``environment/`` (a Dockerfile: the image the agent runs in), ``tests/test.sh`` and
``solution/solve.sh``. Ours adds ``environment/workspace/`` (the starting files, laid out locally) and the
``[harness_rl]`` table.

Import: a Harbor task whose environment is only a Dockerfile has no workspace we could lay out; it is imported
with an empty workspace and marked ``needs_container`` (the local bubblewrap sandbox cannot give it its image,
so training and ``validate`` skip it). A folder we exported comes back as it was.

Export: the folder is copied, and ``environment/Dockerfile`` is added when missing: a Python image with pandas
and pytest that copies the workspace to ``/app`` (our scripts default to Harbor's ``/app``, ``/tests`` and
``/logs/verifier`` when the ``HRL_*`` variables are unset).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from harness_rl.envs.spec import DIFFICULTIES, TaskSpec
from harness_rl.envs.taskdir import TASK_ID_PATTERN, TASK_TOML, TaskFormatError, load_task_dirs, write_task_dir

#: The image of an exported task when it has no Dockerfile of its own.
EXPORT_DOCKERFILE = """FROM python:3.11-slim
RUN pip install --no-cache-dir pandas pytest
WORKDIR /app
COPY workspace/ /app/
"""

NO_ORACLE = """#!/usr/bin/env bash
echo "this imported Harbor task has no solution/solve.sh" >&2
exit 1
"""

_OURS = ("version", "metadata", "verifier", "agent", "harness_rl")


def harbor_task_folders(src: Path) -> list[Path]:
    """``src`` if it is a task folder (holds task.toml), else the task folders directly under it."""
    src = Path(src)
    if (src / TASK_TOML).is_file():
        return [src]
    return sorted(p for p in src.iterdir() if p.is_dir() and (p / TASK_TOML).is_file())


def harbor_task_id(name: str) -> str:
    """A safe task id from a Harbor folder name (lower case, other characters as dashes)."""
    task_id = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).lstrip("._-")[:200]
    if not TASK_ID_PATTERN.fullmatch(task_id):
        raise TaskFormatError(f"cannot make a task id of folder name {name!r}")
    return task_id


def _read_tree(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def import_harbor_task(folder: Path, out: Path, *, split: str = "train") -> Path:
    """Import one Harbor task folder into ``out`` (replacing a folder of the same id); returns our folder.

    Raises:
        TaskFormatError: task.toml is not valid TOML, or instruction.md or tests/test.sh is missing.
    """
    folder = Path(folder)
    toml_path = folder / TASK_TOML
    try:
        doc: dict[str, Any] = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise TaskFormatError(f"{toml_path}: not valid TOML: {err}") from err
    for required in ("instruction.md", "tests/test.sh"):
        if not (folder / required).is_file():
            raise TaskFormatError(f"{folder / required}: missing")
    meta = doc.get("metadata") or {}
    ours = doc.get("harness_rl") or {}
    env_dir = folder / "environment"
    workspace = _read_tree(env_dir / "workspace")
    env_files = {
        f"environment/{rel}": content
        for rel, content in _read_tree(env_dir).items()
        if not rel.startswith("workspace/")
    }
    # Ours record whether they need a container; a foreign task does when its environment is an image.
    needs_container = bool(ours.get("needs_container", bool(env_files) and not (env_dir / "workspace").is_dir()))
    difficulty = meta.get("difficulty")
    metadata = dict(ours.get("metadata") or {})
    if difficulty not in DIFFICULTIES:
        metadata.setdefault("harbor_difficulty", str(difficulty))
        difficulty = "medium"
    solution = _read_tree(folder / "solution")
    solution.setdefault("solve.sh", NO_ORACLE.encode())
    task_id = harbor_task_id(folder.name)
    spec = TaskSpec(
        id=task_id,
        instruction=(folder / "instruction.md").read_text(encoding="utf-8"),
        workspace=workspace,
        tests=_read_tree(folder / "tests"),
        solution=solution,
        difficulty=difficulty,
        category=str(meta.get("category", "")),
        source=str(ours.get("source", "harbor")),
        split=str(ours.get("split", split)),
        group=str(ours.get("group", task_id)),
        protected_paths=tuple(ours.get("protected_paths", ())),
        agent_timeout_s=float((doc.get("agent") or {}).get("timeout_sec", 600.0)),
        verifier_timeout_s=float((doc.get("verifier") or {}).get("timeout_sec", 120.0)),
        tags=tuple(str(t) for t in meta.get("tags", ())),
        metadata=metadata,
    )
    extra_toml = {k: v for k, v in doc.items() if k not in _OURS}
    return write_task_dir(spec, out, overwrite=True, needs_container=needs_container, extra_files=env_files,
                          extra_toml=extra_toml)  # fmt: skip


def import_harbor(src: Path, out: Path, *, split: str = "train") -> list[Path]:
    """Import every Harbor task folder of ``src`` (a task folder or a folder of them) into ``out``."""
    return [import_harbor_task(folder, out, split=split) for folder in harbor_task_folders(src)]


def export_harbor(src_root: Path, out: Path) -> list[Path]:
    """Export every task folder under ``src_root`` as a Harbor task folder under ``out`` (atomically each)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for task in load_task_dirs(src_root):
        assert task.task_dir is not None
        final = out / task.id
        tmp = Path(tempfile.mkdtemp(prefix=f".{task.id}.", dir=out))
        try:
            shutil.copytree(task.task_dir, tmp / "task", symlinks=True)
            dockerfile = tmp / "task" / "environment" / "Dockerfile"
            if not dockerfile.exists():
                dockerfile.write_text(EXPORT_DOCKERFILE)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp / "task", final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        written.append(final)
    return written
