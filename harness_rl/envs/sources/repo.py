"""Repository source (after Repo2RLEnvs): break one function of a real project; its own tests are the verifier.

Projects are the pinned sdists of ``repo_fetch`` (fetched once, online, with ``python -m
harness_rl.envs.sources.repo fetch``; building is offline). For each, the builder runs the project's test suite
once (the baseline), enumerates mutations of its public functions (``repo_mutate``), runs the tests that concern
each mutated function, and keeps a mutation when some of them fail. A task is then:

- workspace: the project's code with the mutation, plus its licence, readme and packaging files, and none of
  its tests (the verifier's tests are the project's own: leaving any in the workspace would let the agent read
  the expected behaviour, and the tests of other functions are left out too so the rule is simple);
- tests/: ``suite/`` (the project's test files and pytest configuration), ``selected.txt`` (the tests that fail
  on the mutant, plus a few that pass as guards against fixes that break neighbouring behaviour),
  ``test.sh``, which runs them on the workspace's code, and ``score.py``, which reads pytest's per-test
  summary: reward 1.0 iff every selected test is reported passed (never from pytest's exit status alone);
- solution/: the original file and ``solve.sh``, which puts it back.

Splits: 270 tasks, 230 "train" and 40 "heldout". The group is ``project:module:function`` (a function gives at
most two tasks, with different operators); groups, not tasks, are drawn for held-out, so no held-out function
has a twin in training. Same seed, same tasks and split on any machine: every choice is ordered by a sha256 of
the seed and a stable key, never by Python's ``hash`` or completion order.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness_rl.envs.sources.repo_fetch import (
    CONFIG_FILES,
    CONTEXT_FILES,
    PROJECTS,
    Project,
    default_cache_dir,
    extract,
    fetch,
    read_tree,
)
from harness_rl.envs.sources.repo_mutate import Function, Mutation, is_valid, mutations
from harness_rl.envs.sources.repo_tests import TestRunner, verifier_files
from harness_rl.envs.spec import TaskSpec

log = logging.getLogger(__name__)

N_TASKS = 270
N_HELDOUT = 40
MAX_PER_FUNCTION = 2
#: Mutations tried per function: its deleted body, if any, and this many small edits with distinct operators.
SMALL_EDITS_PER_FUNCTION = 2
MAX_FAILING = 20
MAX_GUARDS = 5
#: A function whose tests number more than this is skipped: running them per mutant would be too slow.
MAX_CANDIDATE_TESTS = 400
MUTANT_TIMEOUT_S = 180.0  # generous: a load-induced timeout would change which tasks a machine builds
VERIFIER_TIMEOUT_S = 120
MAX_MODULE_BYTES = 300_000

SOLVE_SH = """#!/usr/bin/env bash
# Oracle: put the original file back.
set -eu
SOL="${{HRL_SOLUTION_DIR:-/solution}}"
mkdir -p "$(dirname {path})"
cp "$SOL/original/{path}" {path}
"""


def _rank(*parts: object) -> str:
    """Stable sort key: sha256 of the parts (Python's ``hash`` is salted per process)."""
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@dataclass
class _Prepared:
    """A project unpacked: its code, its tests and what its baseline run passed."""

    project: Project
    code: dict[str, bytes]
    suite: dict[str, bytes]
    context: dict[str, bytes]
    passing: tuple[str, ...]

    def __post_init__(self) -> None:
        # Words of each test file, to tell which files use a name (computed once: it is asked per function).
        self._words = {
            rel: set(re.findall(r"\w+", data.decode("utf-8", "replace")))
            for rel, data in self.suite.items()
            if rel.endswith(".py")
        }

    def candidate_tests(self, fn: Function) -> list[str]:
        """Baseline-passing tests that concern ``fn``: those named after it, else those of files that use it.

        Returns [] when there are more than ``MAX_CANDIDATE_TESTS`` (too slow to run per mutant).
        """
        name = fn.qualname.split(".")[-1]
        cls = fn.qualname.split(".")[0] if "." in fn.qualname else None

        def file_uses(test: str, word: str | None) -> bool:
            return word is None or word in self._words.get(test.partition("::")[0], ())

        named = [t for t in self.passing if _norm(name) in _norm(t.partition("::")[2]) and file_uses(t, cls)]
        tests = named or [t for t in self.passing if file_uses(t, name) and file_uses(t, cls)]
        return tests if len(tests) <= MAX_CANDIDATE_TESTS else []


@dataclass(frozen=True)
class _Accepted:
    prepared: _Prepared
    mutation: Mutation
    failing: tuple[str, ...]
    guards: tuple[str, ...]


class RepoBuilder:
    """Builds the repository source's tasks from the sdist cache (see the module docstring)."""

    name = "repo"
    splits = ("train", "heldout")

    def __init__(
        self,
        cache_dir: str | Path | None = None,
        *,
        jobs: int | None = None,
        projects: tuple[Project, ...] = PROJECTS,
        n_tasks: int = N_TASKS,
        n_heldout: int = N_HELDOUT,
    ) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.projects = projects
        self.n_tasks = n_tasks
        self.n_heldout = n_heldout
        self.runner = TestRunner(self.cache_dir / "runs", jobs=jobs)

    def build(self, *, n: int | None = None, seed: int = 0, split: str | None = None) -> Iterator[TaskSpec]:
        """Yield tasks in a deterministic order for ``seed`` (see ``TaskBuilder.build``)."""
        if split is not None and split not in self.splits:
            raise ValueError(f"split {split!r} is not one of {self.splits}")
        with tempfile.TemporaryDirectory(prefix="hrl-repo-src-") as tmp:
            prepared = [self._prepare(p, Path(tmp)) for p in self.projects]
        runs_before = self.runner.runs
        accepted = self._accept(prepared, seed)
        log.info("repo: %d tasks; %d test runs, the rest from the cache", len(accepted), self.runner.runs - runs_before)
        heldout = self._heldout_groups(accepted, seed)
        tasks = [_task(a, "heldout" if _group(a) in heldout else "train") for a in accepted]
        tasks = [t for t in tasks if split is None or t.split == split]
        if n is not None and n > len(tasks):
            raise ValueError(f"the repo source has {len(tasks)} tasks{f' in {split}' if split else ''}, not {n}")
        yield from tasks[:n]

    def _prepare(self, project: Project, tmp: Path) -> _Prepared:
        root = extract(project, self.cache_dir, tmp / project.key)
        code = {rel: b for rel, b in read_tree(root, project.sources).items() if not project.is_test_path(rel)}
        tests = read_tree(root, project.tests)
        suite = {rel: b for rel, b in tests.items() if rel not in project.skip_tests}
        suite |= read_tree(root, tuple(f for f in CONFIG_FILES if (root / f).is_file()))
        context = read_tree(root, tuple(f for f in CONTEXT_FILES if (root / f).is_file()))
        base = self.runner.run({**code, **suite}, list(project.tests), timeout_s=600.0)
        if base.status != "ok" or not base.passed:
            raise RuntimeError(f"{project.key}: its own tests do not run on the unmodified code ({base.status})")
        return _Prepared(project, code, suite, context, tuple(sorted(base.passed)))

    def _candidates(self, prepared: list[_Prepared], seed: int) -> Iterator[tuple[_Prepared, Mutation, list[str]]]:
        """Mutations to try, projects interleaved so that every project is used before any runs out."""
        per_project = []
        for pp in prepared:
            by_function: dict[tuple[str, str], list[Mutation]] = {}
            for rel in sorted(r for r in pp.code if r.endswith(".py") and len(pp.code[r]) <= MAX_MODULE_BYTES):
                for m in mutations(rel, pp.code[rel].decode()):
                    by_function.setdefault((rel, m.function.qualname), []).append(m)
            order = sorted(by_function, key=lambda k: _rank(seed, pp.project.key, *k))
            per_project.append([(pp, by_function[k]) for k in order])
        for i in range(max(map(len, per_project), default=0)):
            for functions in per_project:
                if i >= len(functions):
                    continue
                pp, muts = functions[i]
                tests = pp.candidate_tests(muts[0].function)
                if not tests:
                    continue
                for m in _pick(muts, seed, pp.project.key, pp.code[muts[0].function.path].decode()):
                    yield pp, m, tests

    def _accept(self, prepared: list[_Prepared], seed: int) -> list[_Accepted]:
        """Run candidates in parallel batches, accepting them in candidate order until there are enough."""
        accepted: list[_Accepted] = []
        per_function: dict[str, int] = {}
        candidates = self._candidates(prepared, seed)
        batch_size = max(8, 4 * self.runner.jobs)
        while len(accepted) < self.n_tasks:
            batch = [c for _, c in zip(range(batch_size), candidates, strict=False)]
            if not batch:
                raise ValueError(f"the pinned projects give only {len(accepted)} tasks, not {self.n_tasks}")
            jobs = [
                ({**pp.code, m.function.path: m.source, **pp.suite}, tests, MUTANT_TIMEOUT_S) for pp, m, tests in batch
            ]
            for (pp, m, tests), out in zip(batch, self.runner.run_many(jobs), strict=True):
                group = f"{pp.project.name}:{m.function.path}:{m.function.qualname}"
                failing = sorted(out.failed & set(tests), key=lambda t: _rank(seed, m.key, t))
                if out.status != "ok" or not failing or per_function.get(group, 0) >= MAX_PER_FUNCTION:
                    continue
                guards = _guards(pp, m, out.passed & set(tests), failing, seed)
                per_function[group] = per_function.get(group, 0) + 1
                accepted.append(_Accepted(pp, m, tuple(failing[:MAX_FAILING]), tuple(guards[:MAX_GUARDS])))
                if len(accepted) == self.n_tasks:
                    break
        return accepted

    def _heldout_groups(self, accepted: list[_Accepted], seed: int) -> set[str]:
        """Groups drawn for held-out, in seeded order, while they fit. Groups hold 1 or 2 tasks, so with an even
        total and an even held-out count (270, 40) the draw always lands exactly: the size-1 groups are even in
        number, and the draw can only stop one short once all of them are taken."""
        sizes: dict[str, int] = {}
        for a in accepted:
            sizes[_group(a)] = sizes.get(_group(a), 0) + 1
        chosen, total = set(), 0
        for g in sorted(sizes, key=lambda g: _rank(seed, "heldout", g)):
            if total + sizes[g] <= self.n_heldout:
                chosen.add(g)
                total += sizes[g]
        if total != self.n_heldout:
            raise ValueError(f"could not draw exactly {self.n_heldout} held-out tasks by group (got {total})")
        return chosen


def _pick(muts: list[Mutation], seed: int, project_key: str, original: str) -> list[Mutation]:
    """A function's mutations to try: its deleted body, then small edits with distinct operators."""
    ranked = sorted(muts, key=lambda m: _rank(seed, project_key, m.key))
    picked = [m for m in ranked if m.operator == "body_deleted" and is_valid(m, original)][:1]
    operators = set()
    for m in ranked:
        if m.operator != "body_deleted" and m.operator not in operators and is_valid(m, original):
            picked.append(m)
            operators.add(m.operator)
        if len(operators) == SMALL_EDITS_PER_FUNCTION:
            break
    return picked


def _guards(pp: _Prepared, m: Mutation, passed_on_mutant: set[str], failing: list[str], seed: int) -> list[str]:
    """Tests that pass on the original and should still pass after a fix: first those of the function that the
    mutant passed, then other tests of the failing tests' files (they catch a fix that breaks neighbours)."""
    files = {t.partition("::")[0] for t in failing}
    near = [t for t in pp.passing if t.partition("::")[0] in files and t not in passed_on_mutant and t not in failing]
    ranked = sorted(passed_on_mutant, key=lambda t: _rank(seed, m.key, t))
    return (ranked + sorted(near, key=lambda t: _rank(seed, m.key, t)))[:MAX_GUARDS]


def _group(a: _Accepted) -> str:
    return f"{a.prepared.project.name}:{a.mutation.function.path}:{a.mutation.function.qualname}"


def _test_name(node_id: str) -> str:
    return node_id.rpartition("::")[2].split("[")[0]


def _task(a: _Accepted, split: str) -> TaskSpec:
    p, m, fn = a.prepared.project, a.mutation, a.mutation.function
    slug = re.sub(r"[^a-z0-9]+", "-", f"{p.name}-{Path(fn.path).stem}-{fn.qualname}".lower()).strip("-")
    task_id = f"repo-{slug}-{m.operator.replace('_', '-')}-{m.site}"
    names = list(dict.fromkeys(_test_name(t) for t in a.failing))[:3]
    if m.operator == "body_deleted":
        what = (
            f"The body of `{fn.qualname}` in `{fn.path}` (line {fn.lineno}) was removed: it now only raises "
            "`NotImplementedError`. Write it again so that it does what its docstring, its name and the rest of "
            "the project expect."
        )
        difficulty = "hard" if fn.n_lines > 25 else "medium"
        category = "implementation"
    else:
        what = (
            f"A bug was introduced into `{fn.qualname}` in `{fn.path}`: one small expression in it was changed. "
            "Find the change and fix it."
        )
        difficulty = "easy" if fn.n_lines <= 25 else "medium"
        category = "bug-fix"
    instruction = (
        f"The workspace holds the source code of {p.name} {p.version}, an open-source Python project, without "
        f"its tests.\n\n{what}\n\nSome of the project's own tests fail because of it, among them "
        + ", ".join(f"`{n}`" for n in names)
        + ". Those tests and some that pass now will be run on your workspace to check your work; all must "
        "pass. Change only the project's code, and keep its public names and signatures.\n"
    )
    selected = [*a.failing, *a.guards]
    tests = {f"suite/{rel}": data for rel, data in a.prepared.suite.items()}
    tests["selected.txt"] = "".join(t + "\n" for t in selected)
    tests.update(verifier_files(p.sources, len(selected), VERIFIER_TIMEOUT_S - 20))
    workspace = {**a.prepared.context, **a.prepared.code, fn.path: m.source}
    return TaskSpec(
        id=task_id,
        instruction=instruction,
        workspace=workspace,
        tests=tests,
        solution={"solve.sh": SOLVE_SH.format(path=fn.path), f"original/{fn.path}": a.prepared.code[fn.path]},
        difficulty=difficulty,
        category=category,
        source="repo",
        split=split,
        group=_group(a),
        verifier_timeout_s=float(VERIFIER_TIMEOUT_S),
        tags=("python", p.name, m.operator),
        metadata={
            "project": p.name,
            "version": p.version,
            "sdist_sha256": p.sha256,
            "module": fn.path,
            "function": fn.qualname,
            "operator": m.operator,
            "site": m.site,
            "line": m.lineno,
            "failing_tests": len(a.failing),
            "guard_tests": len(a.guards),
        },
    )


def main(argv: list[str] | None = None) -> None:
    """``python -m harness_rl.envs.sources.repo fetch [--cache DIR]``: download the pinned sdists once."""
    parser = argparse.ArgumentParser(prog="python -m harness_rl.envs.sources.repo")
    parser.add_argument("command", choices=["fetch"])
    parser.add_argument("--cache", type=Path, default=None, help="cache folder (default: $HRL_REPO_CACHE or ~/.cache)")
    args = parser.parse_args(argv)
    for path in fetch(args.cache):
        print(path)


if __name__ == "__main__":
    main()
