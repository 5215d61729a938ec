"""Mutable state of one inspection: where relative paths point, known variables, and the actions found so far.

The shell, Python and patch analysers call each other (``bash -c``, ``python -c``, ``subprocess.run``,
``apply_patch <<EOF``); they share one :class:`Scope`, which also bounds the recursion so hostile input
(``bash -c "bash -c ..."`` a thousand deep) ends as an undecidable action instead of a ``RecursionError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.paths import resolve

#: How deep ``bash -c`` / ``python -c`` / ``exec()`` / ``eval`` may nest before the rest counts as undecidable.
MAX_NESTING = 8


@dataclass
class Scope:
    """Shared state of one :meth:`SafetyGate.inspect` call.

    Attributes:
        workspace: The task's workspace root (absolute).
        home: What ``~`` and ``$HOME`` stand for.
        cwd: The directory relative paths resolve against; ``cd`` in a command list moves it.
        max_chars: Longer code or command text is undecidable rather than parsed.
        actions: The canonical actions found so far, in order.
        variables: Shell variables with a statically known value (None = assigned, value unknown).
        nesting: Current ``bash -c`` / ``python -c`` nesting depth.
    """

    workspace: str
    home: str
    cwd: str
    max_chars: int
    actions: list[Action] = field(default_factory=list)
    variables: dict[str, str | None] = field(default_factory=dict)
    nesting: int = 0

    def emit(self, action: Action) -> None:
        """Record one action."""
        self.actions.append(action)

    def undecidable(self, detail: str) -> None:
        """Record something that cannot be resolved statically."""
        self.actions.append(Action(Kind.UNDECIDABLE, detail=detail[:300]))

    def file(self, kind: Kind, raw: str | None, content: str | None = None, what: str = "") -> None:
        """Record a file action on ``raw`` (None = a dynamic path, which is undecidable)."""
        if raw is None:
            self.undecidable(f"{kind.value} of a path computed at run time{(' by ' + what) if what else ''}")
            return
        if not raw or "\x00" in raw:
            return
        where = resolve(raw, self.cwd, self.home)
        self.actions.append(Action(kind, path=where.path, raw=raw, content=content, traversal=where.traversal))

    def link(self, link_raw: str | None, target_raw: str | None) -> None:
        """Record a symlink ``link_raw -> target_raw``; relative targets resolve from the link's directory."""
        if link_raw is None or target_raw is None:
            self.undecidable("symlink with a path computed at run time")
            return
        link = resolve(link_raw, self.cwd, self.home)
        base = link.path.rsplit("/", 1)[0] or "/"
        target = resolve(target_raw, base if not target_raw.startswith(("/", "~")) else self.cwd, self.home)
        self.actions.append(
            Action(
                Kind.LINK,
                path=link.path,
                raw=f"{link_raw} -> {target_raw}",
                target=target.path,
                traversal=target.traversal or link.traversal,
            )
        )

    def enter(self) -> bool:
        """Go one nesting level deeper; False (and an undecidable action) when the limit is reached."""
        if self.nesting >= MAX_NESTING:
            self.undecidable(f"commands nested more than {MAX_NESTING} levels deep")
            return False
        self.nesting += 1
        return True

    def leave(self) -> None:
        """Come back from one nesting level."""
        self.nesting -= 1

    def too_long(self, text: str, what: str) -> bool:
        """True (and an undecidable action) when ``text`` is longer than the analysis limit."""
        if len(text) > self.max_chars:
            self.undecidable(f"{what} of {len(text)} characters is longer than the analysis limit")
            return True
        return False
