"""Where a harness process runs: the Sandbox and ContainerSandbox protocols, the per-rollout folder layout and the
run result."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

# Folders no sandboxed process of this Python process may see (task folders: their tests/ and solution/).
# Process-wide because whoever loads tasks (the task mix, the evaluator) is not whoever builds the layouts
# (each harness), and a task folder must stay hidden from every harness that runs in this process.
_HIDDEN_LOCK = threading.Lock()
_HIDDEN_FROM_SANDBOXES: set[Path] = set()


def hide_from_sandboxes(*paths: Path) -> None:
    """Hide ``paths`` (e.g. task folders) from every sandbox layout built afterwards in this process.

    Raises:
        ValueError: A path holds this project's checkout or its interpreter, which every sandbox needs.
    """
    needed = [Path(__file__).resolve().parents[2], Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
    resolved = [Path(p).resolve() for p in paths]
    for path in resolved:
        for need in needed:
            if need == path or path in need.parents:
                raise ValueError(f"cannot hide {path} from sandboxes: it holds {need}, which they need; "
                                 "keep task folders in a folder of their own")  # fmt: skip
    with _HIDDEN_LOCK:
        _HIDDEN_FROM_SANDBOXES.update(resolved)


def hidden_from_sandboxes() -> tuple[Path, ...]:
    """The folders ``hide_from_sandboxes`` registered that still exist (a deleted one needs no hiding, and
    bubblewrap cannot mount over a path that is gone)."""
    with _HIDDEN_LOCK:
        paths = sorted(_HIDDEN_FROM_SANDBOXES)
    return tuple(p for p in paths if p.is_dir())


@dataclass(frozen=True)
class SandboxLayout:
    """The folders one sandboxed process may see and write.

    Attributes:
        workspace: The task workspace; the process's working directory, writable.
        home: The per-rollout HOME, writable.
        tmp: The per-rollout temporary folder, writable (mounted at /tmp when isolated).
        writable: Further writable folders (e.g. where the harness writes its trajectory).
        hidden: Folders replaced by an empty tmpfs before the writable folders are bound, so that the
            process sees neither other rollouts nor verifier files nor the run folder. Writable folders
            inside a hidden folder stay visible (they are bound on top of the tmpfs). ``for_rollout`` adds
            every folder registered with ``hide_from_sandboxes`` (the task folders).
        readonly: Folders the process needs read-only even if they lie under /tmp or a hidden folder
            (e.g. the harness's venv when the tools folder is under /tmp in tests).
    """

    workspace: Path
    home: Path
    tmp: Path
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    readonly: tuple[Path, ...] = ()

    @classmethod
    def for_rollout(
        cls, rollout_dir: Path, workspace: Path | None = None, readonly: tuple[Path, ...] = ()
    ) -> SandboxLayout:
        """The standard layout of one rollout folder.

        ``rollout_dir/{workspace,home,tmp,harness}``; ``harness/`` is writable for the harness's own
        output (trajectory, config dir). The whole rollout folder is hidden, so files the rollout worker
        keeps there (verifier output, logs, the session trace) are invisible to the process, and so is
        every folder registered with ``hide_from_sandboxes`` (task folders with their tests and solutions).

        Args:
            rollout_dir: The rollout's private folder.
            workspace: The task workspace if it is not ``rollout_dir/workspace``.
            readonly: See the class attribute.
        """
        rollout_dir = rollout_dir.resolve()
        return cls(
            workspace=(workspace or rollout_dir / "workspace").resolve(),
            home=rollout_dir / "home",
            tmp=rollout_dir / "tmp",
            writable=(rollout_dir / "harness",),
            hidden=(rollout_dir, *hidden_from_sandboxes()),
            readonly=tuple(Path(p).resolve() for p in readonly),
        )

    def create(self) -> None:
        """Create every writable folder (called before the process starts)."""
        for path in (self.workspace, self.home, self.tmp, *self.writable):
            path.mkdir(parents=True, exist_ok=True)


class SandboxClosedError(RuntimeError):
    """A run was asked of a sandbox after ``terminate_all``: the run is shutting down and starts nothing new."""


@dataclass
class ProcessResult:
    """How a sandboxed process ended.

    Attributes:
        returncode: Exit status (negative: killed by that signal).
        timed_out: True when the wall-clock limit was reached and the process tree was killed.
        seconds: Wall-clock seconds from start to exit.
        isolation: "bwrap" or "none".
        killed_pids: PIDs of leftover processes of this run that had to be killed.
    """

    returncode: int
    timed_out: bool
    seconds: float
    isolation: str
    killed_pids: list[int] = field(default_factory=list)


@runtime_checkable
class Sandbox(Protocol):
    """Runs one process (a harness and everything it spawns) under isolation and resource caps."""

    @property
    def isolation(self) -> str:
        """The isolation in effect ("bwrap", "none", ...); read when the rollout is recorded."""
        ...

    def command(self, argv: Sequence[str], layout: SandboxLayout) -> list[str]:
        """The full command line that runs ``argv`` in the sandbox; called by ``run`` and by tests."""
        ...

    def run(
        self,
        argv: Sequence[str],
        layout: SandboxLayout,
        *,
        env: Mapping[str, str],
        timeout_s: float,
        stdout: IO[bytes] | None = None,
        stderr: IO[bytes] | None = None,
    ) -> ProcessResult:
        """Run ``argv`` to completion or until ``timeout_s``; called once per rollout by the harness.

        stdin is /dev/null. At the limit the whole process tree is killed (SIGTERM, then SIGKILL) and no
        process started by this call survives the return.
        """
        ...

    def terminate_all(self) -> list[int]:
        """Stop every run in flight and refuse later ones; called once on shutdown. Returns the stopped PIDs."""
        ...

    def terminate_under(self, folder: Path) -> list[int]:
        """Stop the runs in flight whose rollout folder lies inside ``folder``; called when the rollout worker
        cancels a group (its rollouts are ``folder/r<i>``). Other runs go on. Returns the stopped PIDs."""
        ...


@runtime_checkable
class ContainerSandbox(Sandbox, Protocol):
    """A Sandbox that runs each process in its own container (for clusters where bubblewrap is not allowed).

    The container sees the layout's folders mounted at the same paths, the tools and checkout read-only, and
    the host's loopback (the capture proxy listens there). Each run's container gets a unique name, which is
    what the wall-clock kill and a shutdown address.
    """

    #: The container image every run uses; it must provide the interpreters the harness installs point to.
    image: str

    def container_name(self) -> str:
        """A fresh unique container name for one run; called by ``run`` before ``command``."""
        ...

    def kill(self, name: str) -> None:
        """Kill the named container at once (at the wall-clock limit and on shutdown)."""
        ...
