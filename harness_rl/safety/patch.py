"""Patch bodies: codex's ``apply_patch`` format (also hermes's V4A ``patch`` mode) and unified diffs.

Codex format::

    *** Begin Patch
    *** Add File: path        (then ``+`` lines: the new file)
    *** Update File: path     (optionally ``*** Move to: new_path``, then hunks)
    *** Delete File: path
    *** End Patch

Unified diffs (``git apply``, ``patch -p1``) name their files in ``+++ b/path`` / ``--- a/path`` lines. The
text added by a patch becomes the action's ``content`` so the test-tampering rule can look for skip markers.
"""

from __future__ import annotations

from harness_rl.safety.actions import Kind
from harness_rl.safety.scope import Scope

_ADD = "*** Add File:"
_UPDATE = "*** Update File:"
_DELETE = "*** Delete File:"
_MOVE = "*** Move to:"


def analyze_patch(text: str, scope: Scope) -> None:
    """Record the file actions of a patch body in ``scope``."""
    if scope.too_long(text, "patch"):
        return
    if "*** Begin Patch" in text or _UPDATE in text or _ADD in text or _DELETE in text:
        _codex(text, scope)
    elif "+++ " in text or "--- " in text:
        _unified(text, scope)
    else:
        scope.undecidable("a patch in a format the gate does not know")


def _codex(text: str, scope: Scope) -> None:
    current: tuple[Kind, str] | None = None
    added: list[str] = []

    def flush() -> None:
        if current is not None:
            scope.file(current[0], current[1], content="\n".join(added))

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith((_ADD, _UPDATE, _DELETE)):
            flush()
            added = []
            marker = _ADD if stripped.startswith(_ADD) else _UPDATE if stripped.startswith(_UPDATE) else _DELETE
            path = stripped[len(marker) :].strip()
            kind = {_ADD: Kind.WRITE, _UPDATE: Kind.EDIT, _DELETE: Kind.DELETE}[marker]
            current = (kind, path)
        elif stripped.startswith(_MOVE) and current is not None:
            scope.file(Kind.DELETE, current[1])
            current = (Kind.WRITE, stripped[len(_MOVE) :].strip())
        elif line.startswith("+") and current is not None:
            added.append(line[1:])
    flush()


def _unified(text: str, scope: Scope) -> None:
    old_path: str | None = None
    current: str | None = None
    added: list[str] = []
    for line in text.splitlines():
        if line.startswith("--- "):
            if current is not None:
                scope.file(Kind.EDIT, current, content="\n".join(added))
                current, added = None, []
            old_path = _strip_prefix(line[4:])
        elif line.startswith("+++ "):
            new_path = _strip_prefix(line[4:])
            if new_path == "/dev/null" and old_path:
                scope.file(Kind.DELETE, old_path)
                current = None
            else:
                current = new_path
        elif line.startswith("+") and current is not None:
            added.append(line[1:])
    if current is not None:
        scope.file(Kind.EDIT, current, content="\n".join(added))


def _strip_prefix(header: str) -> str:
    path = header.split("\t")[0].strip()
    if path.startswith(("a/", "b/")):
        return path[2:]
    return path
