"""Fail closed: a training or evaluation run refuses to start when its rollouts would run without isolation.

Without bubblewrap (or the docker backend) a rollout is a plain subprocess of the host user: it sees the
home folder, every run folder and the task caches, and the policy being trained is an agent with a shell.
A run that would silently continue like that is refused unless the user says so with
``sandbox.allow_unisolated=true``; then it is logged loudly and recorded in the run's ``metadata.json``.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

#: ``Sandbox.isolation`` values that isolate a rollout from the host.
ISOLATING = frozenset({"bwrap", "docker"})


class UnisolatedSandboxError(RuntimeError):
    """Rollouts would run unisolated and ``sandbox.allow_unisolated`` is not set."""


def require_isolation(isolation: str, *, allow_unisolated: bool, entry_point: str) -> None:
    """Raise unless ``isolation`` isolates rollouts or the user allowed running without.

    Args:
        isolation: The run's ``Sandbox.isolation`` ("bwrap", "docker", "none").
        allow_unisolated: ``cfg.sandbox.allow_unisolated``.
        entry_point: What is starting ("train.py", "eval.py"), for the messages.

    Raises:
        UnisolatedSandboxError: Unisolated and not allowed; the message names both fixes.
    """
    if isolation in ISOLATING:
        return
    if not allow_unisolated:
        raise UnisolatedSandboxError(
            f"{entry_point} refuses to run rollouts without isolation (sandbox isolation {isolation!r}: "
            "bubblewrap (bwrap) is missing or unusable here). Install it with `make system-deps` "
            "(apt-get install -y bubblewrap), or set sandbox.allow_unisolated=true to run the agents as plain "
            "host processes that can read your home folder and other runs (recorded in metadata.json)"
        )
    logger.warning(
        "sandbox.allow_unisolated=true: %s runs rollouts WITHOUT isolation (sandbox isolation %r); the agents "
        "can read the host user's files, other runs and the task caches. Recorded in metadata.json.",
        entry_point,
        isolation,
    )
