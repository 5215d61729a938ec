"""Built-in verifier checks, run as ``python -I -m harness_rl.envs.checks <check> ...`` in the workspace.

Each prints one JSON line ``{"score": x}`` and exits 0; with ``--reward-file F`` it also writes ``{"reward": x}``
to F (a task's test.sh passes ``$HRL_LOGS_DIR/reward.json``). Any other ending means the check itself failed
(the rollout is then unscorable, not wrong). ``-I`` matters: the working directory is the agent's workspace,
and without it a file the agent left there (``harness_rl/...``) could shadow this module.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys

#: Read at most this much of a file: the agent controls the workspace and could leave a huge file.
MAX_READ_BYTES = 1 << 20


def file_contains(path: str, word: str) -> float:
    """1.0 when ``path`` is a regular file (symlinks followed) holding ``word`` as a whole word,
    case-insensitively; else 0.0. Devices, FIFOs and folders score 0 without being read."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return 0.0
    if not stat.S_ISREG(st.st_mode):
        return 0.0
    with open(path, "rb") as f:
        text = f.read(MAX_READ_BYTES).decode("utf-8", errors="replace")
    return 1.0 if re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE) else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness_rl.envs.checks")
    sub = parser.add_subparsers(dest="check", required=True)
    fc = sub.add_parser("file_contains")
    fc.add_argument("--path", required=True)
    fc.add_argument("--word", required=True)
    fc.add_argument("--reward-file", help='also write {"reward": score} here')
    args = parser.parse_args(argv)
    score = file_contains(args.path, args.word)
    if args.reward_file:
        with open(args.reward_file, "w") as f:
            json.dump({"reward": score}, f)
    print(json.dumps({"score": score}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
