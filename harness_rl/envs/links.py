"""Remove workspace links that lead out of the workspace, before a verifier reads it.

A policy with a shell can leave ``answer.txt -> /path/the/verifier/will/copy/expected.txt``: the link dangles
while the agent runs and resolves only when the verifier starts, so the verifier compares its expected output
with itself. A hard link does the same through a shared inode (a second name of a file outside the
workspace, whose content someone else writes later). Before every verifier run, such links are deleted.

Deleted rather than scored 0: agents legitimately leave links out of the workspace (``python -m venv .venv``
links ``.venv/bin/python`` to the system interpreter; node tools link into global installs), and punishing
those would teach the policy to avoid ordinary tooling. A deleted link can only lose the agent reward: the
verifier then sees the workspace as if the link had never been made. Links that stay inside the workspace
(a project's own ``README -> docs/README.md``) are kept.
"""

from __future__ import annotations

import logging
import os
import stat
from collections import Counter
from pathlib import Path

logger = logging.getLogger(__name__)


def remove_escaping_links(workspace: Path) -> list[str]:
    """Delete every symlink under ``workspace`` that resolves outside it (dangling ones included: their target
    may appear later) and every regular file with a hard link outside it.

    A regular file has a name outside the workspace when its link count (``st_nlink``) exceeds the number of
    its names found inside the workspace. Directories are walked without following links.

    Args:
        workspace: The rollout's workspace, after every process of the agent is gone.

    Returns:
        The workspace-relative paths deleted, sorted (also logged as a warning).
    """
    root = Path(os.path.realpath(workspace))
    # Decide everything before deleting anything: a link that leaves through another link must be judged while
    # that other link still exists.
    doomed: list[Path] = []
    files: list[tuple[Path, os.stat_result]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        # os.walk lists a symlink to a directory under dirnames (without entering it); check it like any link.
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                if not _inside(Path(os.path.realpath(path)), root):
                    doomed.append(path)
            elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                files.append((path, st))
    names_inside = Counter((st.st_dev, st.st_ino) for _, st in files)
    doomed += [path for path, st in files if st.st_nlink > names_inside[(st.st_dev, st.st_ino)]]
    removed = []
    for path in doomed:
        path.unlink()
        removed.append(str(path.relative_to(root)))
    removed.sort()
    if removed:
        logger.warning("removed %d link(s) out of workspace %s before verifying: %s", len(removed), root, removed)
    return removed


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
