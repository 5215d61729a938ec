"""The rule interface and the path classifications several rules share."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import ClassVar

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.config import SafetyConfig
from harness_rl.safety.paths import has_component, inside, matches_any

FILE_CHANGES = frozenset({Kind.WRITE, Kind.EDIT, Kind.DELETE, Kind.LINK})
FILE_ACCESS = frozenset({Kind.READ, Kind.SEARCH}) | FILE_CHANGES


@dataclass(frozen=True)
class RuleContext:
    """What a rule may consult besides the action.

    Attributes:
        config: The gate's configuration.
        workspace: The task's workspace root.
        home: What ``~`` stands for.
        protected: Protected-path patterns: the config's defaults plus the task's own.
        scoring: Scoring-file patterns: the config's defaults plus the task's own.
        own_pids: Process ids of the agent's own background jobs (``kill`` of these is allowed).
    """

    config: SafetyConfig
    workspace: str
    home: str
    protected: tuple[str, ...]
    scoring: tuple[str, ...]
    own_pids: frozenset[str]

    def in_workspace(self, path: str) -> bool:
        """Whether ``path`` is inside the workspace."""
        return inside(path, self.workspace)

    def is_test_path(self, path: str) -> bool:
        """A test file or anything in a test directory (the directory itself included)."""
        name = posixpath.basename(path)
        if matches_any(path, self.config.test_files, self.workspace):
            return True
        return name in self.config.test_dirs or has_component(path, self.config.test_dirs, self.workspace)


class Rule:
    """One named, individually switchable check.

    Subclasses set ``name`` (the config key and the audit/metric label) and ``explanation`` (what the model
    reads instead of the tool's output), and implement :meth:`check`.
    """

    name: ClassVar[str]
    explanation: ClassVar[str]

    def check(self, action: Action, ctx: RuleContext) -> str | None:
        """Called once per canonical action of a tool call, in order. Returns why it objects, or None."""
        raise NotImplementedError


def argv_words(action: Action) -> list[str]:
    """The argv of an exec action without dynamic words."""
    return [a for a in action.argv if a is not None]
