"""``python -m harness_rl.envs``: build, validate, count, import and export task folders.

build SOURCE --out DIR [--n N --seed S --split NAME]   write a source's tasks as task folders
validate DIR [--workers W]                            format, oracle passes, empty attempt fails; ends with
                                                      ``tasks=N oracle_pass=R empty_pass=R``
stats DIR [--json]                                    counts by source, difficulty, category, split
import-harbor SRC --out DIR [--split NAME]            Harbor task folder(s) -> ours
export-harbor DIR --out OUT                           ours -> Harbor task folders
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from harness_rl.envs.sources import BUILDERS

console = Console(stderr=True)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def cmd_build(args: argparse.Namespace) -> int:
    from harness_rl.envs.build import build_source

    start = time.monotonic()
    with _progress() as progress:
        bar = progress.add_task(f"building {args.source}", total=args.n)
        folders = build_source(
            args.source,
            Path(args.out),
            n=args.n,
            seed=args.seed,
            split=args.split,
            on_written=lambda _: progress.advance(bar),
        )
    console.print(f"wrote {len(folders)} task(s) of {args.source} to {args.out} in {time.monotonic() - start:.1f} s")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from harness_rl.envs.validate import validate_dir

    root = Path(args.dir)
    total = sum(1 for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else 0
    if not root.is_dir():
        console.print(f"[red]{root} is not a folder[/red]")
        return 2
    start = time.monotonic()
    with _progress() as progress:
        bar = progress.add_task(f"validating {root.name}", total=total)
        report = validate_dir(root, workers=args.workers, on_done=lambda _: progress.advance(bar))
    for check in report.invalid:
        console.print(f"[red]INVALID[/red] {check.task_id}: " + "; ".join(p[:500] for p in check.problems))
    if report.skipped:
        console.print(f"skipped {len(report.skipped)} task(s) that need a container: {', '.join(report.skipped[:10])}")
    if report.leaks:
        console.print(f"[red]SPLIT LEAK[/red] {report.leaks}")
    console.print(f"validated in {time.monotonic() - start:.1f} s")
    print(report.summary_line(), flush=True)
    return 1 if report.invalid or report.leaks else 0


def cmd_stats(args: argparse.Namespace) -> int:
    from harness_rl.envs.stats import stats_tables, task_stats

    stats = task_stats(Path(args.dir))
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    out = Console()
    for table in stats_tables(stats):
        out.print(table)
    if stats["needs_container"]:
        out.print(f"{stats['needs_container']} task(s) need a container")
    return 0


def cmd_import_harbor(args: argparse.Namespace) -> int:
    from harness_rl.envs.harbor import import_harbor

    folders = import_harbor(Path(args.src), Path(args.out), split=args.split)
    console.print(f"imported {len(folders)} Harbor task(s) into {args.out}")
    return 0


def cmd_export_harbor(args: argparse.Namespace) -> int:
    from harness_rl.envs.harbor import export_harbor

    folders = export_harbor(Path(args.dir), Path(args.out))
    console.print(f"exported {len(folders)} task(s) as Harbor folders into {args.out}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness_rl.envs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write a source's tasks as task folders")
    b.add_argument("source", choices=sorted(BUILDERS))
    b.add_argument("--out", required=True)
    b.add_argument("--n", type=int, default=None, help="at most this many tasks (default: all)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--split", default=None, help="only this split (default: all)")
    b.set_defaults(func=cmd_build)
    v = sub.add_parser("validate", help="format, oracle passes, empty attempt fails")
    v.add_argument("dir")
    v.add_argument("--workers", type=int, default=None, help="tasks in flight (default: the number of cores)")
    v.set_defaults(func=cmd_validate)
    s = sub.add_parser("stats", help="counts by source, difficulty, category, split")
    s.add_argument("dir")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_stats)
    i = sub.add_parser("import-harbor", help="Harbor task folder(s) -> ours")
    i.add_argument("src")
    i.add_argument("--out", required=True)
    i.add_argument("--split", default="train", help="split of imported tasks that do not name one")
    i.set_defaults(func=cmd_import_harbor)
    e = sub.add_parser("export-harbor", help="ours -> Harbor task folders")
    e.add_argument("dir")
    e.add_argument("--out", required=True)
    e.set_defaults(func=cmd_export_harbor)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
