"""Build a source's tasks into task folders, and the task cache that training builds into on first use."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness_rl.envs.sources import get_builder
from harness_rl.envs.spec import TaskSpec
from harness_rl.envs.splits import check_splits_disjoint
from harness_rl.envs.taskdir import load_task_dirs, write_task_dir

#: Folder writers in flight at once: writing is mostly I/O (small files), so threads are enough.
WRITE_THREADS = min(8, (os.cpu_count() or 2) * 2)


def build_source(
    name: str,
    out: Path,
    *,
    n: int | None = None,
    seed: int = 0,
    split: str | None = None,
    options: Mapping[str, Any] | None = None,
    on_written: Callable[[Path], None] | None = None,
) -> list[Path]:
    """Build source ``name``'s tasks as folders under ``out`` (replacing folders of the same ids).

    Args:
        name: A key of ``harness_rl.envs.sources.BUILDERS``.
        out: The folder of task folders.
        n, seed, split: Passed to the builder's ``build``.
        options: The builder's constructor options.
        on_written: Called with each task folder once written (progress bars).

    Returns:
        The task folders, in the builder's order.

    Raises:
        ValueError: The builder refuses the arguments, yields two tasks of one id, or puts one group in two
            splits (``check_splits_disjoint``).
    """
    builder = get_builder(name, **dict(options or {}))
    out = Path(out)
    seen: dict[str, TaskSpec] = {}

    def write(spec: TaskSpec) -> Path:
        folder = write_task_dir(spec, out, overwrite=True)
        if on_written is not None:
            on_written(folder)
        return folder

    with ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="write-task") as pool:
        futures = []
        for spec in builder.build(n=n, seed=seed, split=split):
            if spec.id in seen:
                raise ValueError(f"source {name} built two tasks with id {spec.id!r}")
            seen[spec.id] = spec
            futures.append(pool.submit(write, spec))
        folders = [f.result() for f in futures]
    check_splits_disjoint(seen.values())
    return folders


def cache_key(name: str, *, n: int | None, seed: int, options: Mapping[str, Any]) -> str:
    """The cache folder name of one source build: the source, its arguments and its builder's code.

    The builder's module source is part of the key, so changing a source's code builds afresh instead of
    training on tasks an older version wrote (a source whose data files change should bump a ``version``
    option or attribute).
    """
    builder_cls = type(get_builder(name, **dict(options)))
    try:
        code = Path(inspect.getsourcefile(builder_cls) or "").read_bytes()
    except (OSError, TypeError):
        code = b""
    version = getattr(builder_cls, "version", None)
    key = {"n": n, "seed": seed, "options": dict(options), "version": version}
    payload = json.dumps(key, sort_keys=True, default=str)
    digest = hashlib.sha256(payload.encode() + code).hexdigest()[:12]
    return f"{name}-{digest}"


def ensure_built(
    name: str, cache_dir: Path, *, n: int | None = None, seed: int = 0, options: Mapping[str, Any] | None = None
) -> Path:
    """The cached build of source ``name`` (all its splits), building it first if it is not there yet.

    The build goes to a temporary folder beside its final place and is renamed into it when complete, so a
    crash or a concurrent build never leaves a partial cache behind.
    """
    options = dict(options or {})
    cache_dir = Path(cache_dir)
    final = cache_dir / cache_key(name, n=n, seed=seed, options=options)
    if final.is_dir():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=cache_dir))
    try:
        build_source(name, tmp, n=n, seed=seed, options=options)
        load_task_dirs(tmp)  # everything written reads back before it is published
        tmp.chmod(0o755)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # another process published the same build first: use theirs
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
