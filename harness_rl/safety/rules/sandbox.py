"""Leaving the sandbox: files outside the workspace, credentials and process secrets, escaping symlinks."""

from __future__ import annotations

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.paths import matches_any
from harness_rl.safety.rules.base import FILE_CHANGES, Rule, RuleContext, argv_words

_ESCAPE_TOOLS = frozenset(
    {"chroot", "nsenter", "unshare", "mount", "umount", "docker", "podman", "kubectl", "ctr", "crictl", "runc",
     "setcap", "capsh", "pivot_root", "gdb", "insmod", "modprobe"}
)  # fmt: skip


_HARMLESS_ARGS = frozenset({"--version", "-v", "-V", "version", "--help", "-h", "help", "ps", "images", "info", "-l"})


class SandboxEscape(Rule):
    name = "sandbox_escape"
    explanation = (
        "the task lives in its workspace: writing outside it, leaving it with '..', symlinks that point out of "
        "it, credentials, other processes' environment and container tools are off limits. Nothing was run; "
        "keep your work inside the workspace (temporary files may go to /tmp)."
    )

    def check(self, action: Action, ctx: RuleContext) -> str | None:
        if action.kind is Kind.EXEC and action.argv:
            program = (argv_words(action) or [""])[0]
            if program not in _ESCAPE_TOOLS or set(argv_words(action)[1:]) <= _HARMLESS_ARGS:
                return None  # `docker --version`, `mount` (lists mounts)
            if program == "gdb" and "-p" not in action.argv and "--pid" not in action.argv:
                return None
            return program
        if action.path is None:
            return None
        secret = matches_any(action.path, ctx.config.secret_paths, ctx.workspace)
        if secret and action.kind is not Kind.LIST:
            return f"{action.kind.value} of {action.raw} (secret: {secret})"
        if action.kind is Kind.LINK and action.target is not None and not ctx.in_workspace(action.target):
            if not matches_any(action.target, ctx.config.writable_outside, ctx.workspace):
                return f"symlink {action.raw} points outside the workspace"
        outside = not ctx.in_workspace(action.path)
        if outside and action.kind in FILE_CHANGES:
            if not matches_any(action.path, ctx.config.writable_outside, ctx.workspace):
                return f"{action.kind.value} of {action.raw} outside the workspace"
        if outside and action.traversal and action.kind in (Kind.READ, Kind.SEARCH, Kind.LIST):
            return f"{action.raw} climbs out of the workspace"
        return None
