"""CLI: ``python -m harness_rl.harnesses install [names...]`` installs pinned harnesses (default: all)."""

from __future__ import annotations

import argparse
import logging
import sys

from harness_rl.harnesses import HARNESSES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness_rl.harnesses")
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="install pinned harnesses into the project-local tools folder")
    inst.add_argument("names", nargs="*", help=f"harnesses to install (default: all of {sorted(HARNESSES)})")
    sub.add_parser("list", help="show each harness, its pinned version and whether it is installed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    if args.command == "list":
        for name, cls in sorted(HARNESSES.items()):
            h = cls()
            print(f"{name}\t{h.version() if h.is_installed() else 'not installed'}")
        return 0
    unknown = [n for n in args.names if n not in HARNESSES]
    if unknown:
        parser.error(f"unknown harness(es) {unknown}; known: {sorted(HARNESSES)}")
    for name in args.names or sorted(HARNESSES):
        print(HARNESSES[name]().install())
    return 0


if __name__ == "__main__":
    sys.exit(main())
