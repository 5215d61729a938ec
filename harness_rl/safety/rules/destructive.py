"""Destructive commands: wiping the file system, the workspace or a disk, fork bombs, shutting the box down."""

from __future__ import annotations

import posixpath

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.rules.base import Rule, RuleContext, argv_words

_SYSTEM_DIRS = frozenset(
    {"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root", "/sbin", "/srv",
     "/sys", "/usr", "/var", "/usr/bin", "/usr/lib", "/usr/local", "/var/lib"}
)  # fmt: skip
_DISK_TOOLS = frozenset({"mkfs", "fdisk", "sfdisk", "parted", "wipefs", "mkswap", "sgdisk", "blkdiscard"})
_POWER = frozenset({"shutdown", "reboot", "halt", "poweroff"})


class Destructive(Rule):
    name = "destructive"
    explanation = (
        "this command would destroy the file system, the workspace or the machine (rm -rf of a root, a disk "
        "wipe, a fork bomb). Nothing was run; remove only the specific files you created."
    )

    def check(self, action: Action, ctx: RuleContext) -> str | None:
        if action.kind is Kind.FORK_BOMB:
            return f"fork bomb: {action.raw}"
        if action.kind in (Kind.DELETE, Kind.EDIT, Kind.WRITE) and action.path is not None:
            base = action.path[:-2] if action.path.endswith("/*") else action.path
            base = base.rstrip("/") or "/"
            if action.kind is Kind.DELETE:
                if base in _SYSTEM_DIRS or base in (ctx.home, ctx.workspace, posixpath.join(ctx.workspace, ".git")):
                    return f"removes {action.raw}"
            elif action.kind is Kind.EDIT and base in _SYSTEM_DIRS:
                return f"changes {action.raw} recursively"
            if action.path.startswith("/dev/") and action.path[5:8] in (
                "sda",
                "sdb",
                "nvm",
                "vda",
                "xvd",
                "mem",
                "hda",
            ):
                return f"writes the raw device {action.path}"
        if action.kind is Kind.EXEC and action.argv:
            words = argv_words(action)
            program = words[0] if words else ""
            if program.split(".")[0] in _DISK_TOOLS or program in _POWER:
                return program
            if program == "init" and words[1:2] in (["0"], ["6"]):
                return "init " + words[1]
        return None
