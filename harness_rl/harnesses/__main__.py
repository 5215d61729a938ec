"""CLI: ``python -m harness_rl.harnesses install [names...]`` installs pinned harnesses (default: all);
``list`` shows each harness's pin and whether it is installed; ``check NAME... | all`` runs each named harness
once through the proxy against a scripted engine and prints one JSON line per harness (exit status 1 when any
is not ok)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from harness_rl.harnesses import HARNESSES
from harness_rl.harnesses.install import NPM_TOOLS, PYTHON_TOOLS


def pinned(name: str) -> str:
    """The pinned requirement of a harness ("?" when install.py has no spec for it)."""
    spec = NPM_TOOLS.get(name) or PYTHON_TOOLS.get(name)
    return spec.requirement if spec else "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness_rl.harnesses")
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="install pinned harnesses into the project-local tools folder")
    inst.add_argument("names", nargs="*", help=f"harnesses to install (default: all of {sorted(HARNESSES)})")
    sub.add_parser("list", help="show each harness, its pinned version and whether it is installed")
    chk = sub.add_parser("check", help="run each harness once through the proxy against a scripted engine")
    chk.add_argument("names", nargs="+", help=f"harnesses to check, or 'all' (of {sorted(HARNESSES)})")
    chk.add_argument("--timeout", type=float, default=120.0, help="wall-clock limit of each run, seconds")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    if args.command == "check":
        return check(parser, args.names, args.timeout)

    if args.command == "list":
        for name in sorted(HARNESSES):
            h = HARNESSES[name]()
            print(f"{name}\t{pinned(name)}\t{'installed' if h.is_installed() else 'not installed'}")
        return 0
    unknown = [n for n in args.names if n not in HARNESSES]
    if unknown:
        parser.error(f"unknown harness(es) {unknown}; known: {sorted(HARNESSES)}")
    for name in args.names or sorted(HARNESSES):
        start = time.monotonic()
        binary = HARNESSES[name]().install()
        print(f"{name}\t{pinned(name)}\t{binary}\t{time.monotonic() - start:.1f} s")
    return 0


def check(parser: argparse.ArgumentParser, names: list[str], timeout_s: float) -> int:
    """``check``: one JSON line per harness on stdout; 1 when any harness is not ok."""
    from harness_rl.harnesses.check import expand_names, run_checks  # imports the proxy: only when checking

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per proxy call would bury the results
    try:
        expand_names(names)
    except KeyError as err:
        parser.error(f"unknown harness {err}; known: {sorted(HARNESSES)} or 'all'")
    all_ok = True
    for result in run_checks(names, timeout_s=timeout_s):
        print(json.dumps(result.to_dict()), flush=True)
        all_ok = all_ok and result.ok
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
