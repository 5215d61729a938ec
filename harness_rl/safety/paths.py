"""Path resolution and pattern matching against the workspace (pure string work: nothing touches the disk).

The gate runs in the proxy, not in the sandbox, so it never looks at the real file system: paths are resolved
lexically (``posixpath.normpath``). A symlink that already exists in the workspace is therefore not followed;
creating one that points out of the workspace is caught when it is created.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True, slots=True)
class Resolved:
    """A path resolved against the current directory.

    Attributes:
        path: Absolute normalised path.
        traversal: The written path used ``..``.
    """

    path: str
    traversal: bool


def resolve(raw: str, cwd: str, home: str) -> Resolved:
    """Resolve ``raw`` (as the model wrote it) against ``cwd``; ``~`` stands for ``home``."""
    text = raw.strip()
    if text == "~" or text.startswith("~/"):
        text = home + text[1:]
    elif text.startswith("file://"):
        text = text[len("file://") :]
    if not text.startswith("/"):
        text = posixpath.join(cwd or "/", text)
    traversal = ".." in raw.split("/")
    normalised = posixpath.normpath(text)
    if normalised.startswith("//"):
        normalised = "/" + normalised.lstrip("/")
    return Resolved(normalised, traversal)


def inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both absolute and normalised)."""
    root = root.rstrip("/") or "/"
    return root == "/" or path == root or path.startswith(root + "/")


def relative(path: str, workspace: str) -> str | None:
    """``path`` relative to the workspace, or None when it lies outside."""
    if not inside(path, workspace):
        return None
    rel = posixpath.relpath(path, workspace)
    return "" if rel == "." else rel


def matches(path: str, pattern: str, workspace: str) -> bool:
    """Whether ``path`` (absolute, normalised) matches one pattern (forms in :mod:`harness_rl.safety.config`)."""
    if not pattern:
        return False
    if "/" not in pattern:
        return fnmatchcase(posixpath.basename(path), pattern)
    if pattern.startswith("/"):
        candidate = path
    else:
        rel = relative(path, workspace)
        if rel is None:
            return False
        candidate = rel
    if pattern.endswith("/"):
        base = pattern.rstrip("/")
        return candidate == base or candidate.startswith(base + "/") or fnmatchcase(candidate, base + "/*")
    return fnmatchcase(candidate, pattern)


def matches_any(path: str, patterns: list[str] | tuple[str, ...], workspace: str) -> str | None:
    """The first pattern ``path`` matches, or None."""
    for pattern in patterns:
        if matches(path, pattern, workspace):
            return pattern
    return None


def has_component(path: str, names: list[str] | tuple[str, ...], workspace: str) -> bool:
    """Whether a directory component of ``path`` (below the workspace when inside it) is one of ``names``."""
    rel = relative(path, workspace)
    parts = (rel if rel is not None else path).split("/")[:-1]
    return any(part in names for part in parts)
