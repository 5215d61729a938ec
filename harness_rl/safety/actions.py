"""Canonical actions: what a tool call would do, independent of the harness that exposes the tool.

Every harness tool call (a shell command, a file read, an edit, a patch, a web fetch, a sub-agent) is reduced to
a flat list of :class:`Action` records. The rules only ever look at actions, so one rule covers ``Bash``,
``exec_command``, ``terminal`` and ``bash`` alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    """What an action does."""

    EXEC = "exec"  # a program runs; ``argv`` holds its arguments (None where an argument is dynamic)
    READ = "read"  # file contents are read (``path``)
    SEARCH = "search"  # a tree is searched recursively (grep -r, Grep tool); ``path`` is the root
    LIST = "list"  # names are listed (ls, glob); harmless on its own
    WRITE = "write"  # a file is created or overwritten (``path``, ``content`` when known)
    EDIT = "edit"  # a file is modified in place (``path``, ``content`` = the new text when known)
    DELETE = "delete"  # a file or tree is removed (``path``)
    LINK = "link"  # a symlink is created at ``path`` pointing to ``target``
    NET = "net"  # the network is reached (``url`` or a host/module name)
    SPAWN = "spawn"  # a sub-agent or scheduled job starts (``content`` = its prompt)
    KILL = "kill"  # a signal is sent (``argv`` = the targets as written)
    FORK_BOMB = "fork_bomb"  # unbounded self-replication (shell function or python fork loop)
    UNDECIDABLE = "undecidable"  # cannot be resolved statically (``detail`` says why)


@dataclass(frozen=True, slots=True)
class Action:
    """One canonical effect of a tool call.

    Attributes:
        kind: What the action does.
        path: Absolute, normalised path for file actions; None when the path is dynamic.
        raw: The path or command as the model wrote it (for explanations).
        argv: Program and arguments for ``exec``/``kill``; dynamic arguments are None.
        content: Text written, the new text of an edit, or a sub-agent prompt, when known.
        target: Where a symlink points (absolute, normalised).
        url: URL, host or module name for ``net``.
        traversal: The path was written with ``..`` components.
        detail: Free text for ``undecidable`` and for explanations.
    """

    kind: Kind
    path: str | None = None
    raw: str | None = None
    argv: tuple[str | None, ...] = ()
    content: str | None = None
    target: str | None = None
    url: str | None = None
    traversal: bool = False
    detail: str = ""

    def describe(self) -> str:
        """A short human-readable form used in block explanations."""
        if self.kind in (Kind.EXEC, Kind.KILL):
            return " ".join(a if a is not None else "$?" for a in self.argv)[:200]
        if self.kind is Kind.NET:
            return f"net {self.url}"[:200]
        if self.kind is Kind.UNDECIDABLE:
            return self.detail[:200]
        shown = self.raw or self.path or self.detail
        return f"{self.kind.value} {shown}"[:200]
