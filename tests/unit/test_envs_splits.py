"""Every source's splits are stable across rebuilds with the same seed and disjoint: no dedup group (one
dataset and one template, one project, one session) has tasks in two splits. The other sources add their
names to SOURCES (a test checks every registered source is there)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from harness_rl.envs.sources import BUILDERS, get_builder
from harness_rl.envs.spec import TaskSpec
from harness_rl.envs.splits import SplitLeakError, check_splits_disjoint

#: Source name -> how many tasks to build (None: all of them) and the builder's options, small enough for a
#: unit test; each source's owner tunes its entry.
SOURCES = {
    "smoke": {"n": None, "options": {}},
    "file_write": {"n": None, "options": {}},
    "data": {"n": 24, "options": {}},
    # Two of the ten projects (30 candidate tasks): the full selection runs every mutant's tests.
    "repo": {"n": 6, "options": {"projects": ("inflection", "webcolors"), "n_tasks": 12, "n_heldout": 4}},
    "synthetic": {"n": 12, "options": {}},
}


def _options(name: str) -> dict:
    """The builder options of ``name``, with the repo source's project names turned into its pinned entries."""
    options = dict(SOURCES[name]["options"])
    if "projects" in options:
        from harness_rl.envs.sources.repo_fetch import PROJECTS

        options["projects"] = tuple(p for p in PROJECTS if p.name in options["projects"])
    return options


def _fingerprint(spec: TaskSpec) -> dict:
    return asdict(spec)


#: Sources whose build runs test suites (minutes even for a few tasks): marked slow.
SLOW_SOURCES = {"repo"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_SOURCES else n for n in sorted(SOURCES)]
)
def test_splits_stable_across_rebuilds_and_disjoint(name):
    n = SOURCES[name]["n"]
    first = list(get_builder(name, **_options(name)).build(n=n, seed=3))
    options = _options(name)
    again = list(get_builder(name, **options).build(n=n, seed=3))
    assert first, f"source {name} built no task"
    assert [_fingerprint(s) for s in first] == [_fingerprint(s) for s in again]
    assert len({s.id for s in first}) == len(first)
    check_splits_disjoint(first)
    builder = get_builder(name, **options)
    assert {s.split for s in first} <= set(builder.splits)
    # Building one split gives only that split, stably; for a source built whole, exactly the full build's
    # tasks of that split (a capped build of one split may pick other tasks than a capped build of all).
    for split in builder.splits:
        cap = None if n is None else min(n, 4)
        only = list(get_builder(name, **options).build(n=cap, seed=3, split=split))
        assert all(s.split == split for s in only)
        assert [s.id for s in only] == [s.id for s in get_builder(name, **options).build(n=cap, seed=3, split=split)]
        if n is None:
            assert sorted(s.id for s in only) == sorted(s.id for s in first if s.split == split)


def test_smoke_splits_are_fixed_and_seed_only_reorders():
    a = {s.id: s.split for s in get_builder("smoke").build(seed=0)}
    b = {s.id: s.split for s in get_builder("smoke").build(seed=99)}
    assert a == b and sorted(a.values()).count("heldout") == 4 and len(a) == 16
    with pytest.raises(ValueError):
        list(get_builder("smoke").build(split="eval"))
    with pytest.raises(ValueError):
        list(get_builder("smoke").build(n=17))


def _spec(task_id, split, group, source="data"):
    return TaskSpec(id=task_id, instruction="i", workspace={}, tests={"test.sh": ""}, solution={"solve.sh": ""},
                    difficulty="easy", category="c", source=source, split=split, group=group)  # fmt: skip


def test_check_splits_disjoint_finds_a_group_in_two_splits():
    check_splits_disjoint([_spec("a", "train", "iris/t1"), _spec("b", "train", "iris/t1"),
                           _spec("c", "heldout", "iris/t2"),
                           _spec("d", "heldout", "iris/t1", source="repo")])  # fmt: skip
    with pytest.raises(SplitLeakError, match=r"data/iris/t1: heldout \(c\), train \(a\)"):
        check_splits_disjoint([_spec("a", "train", "iris/t1"), _spec("c", "heldout", "iris/t1")])
    # no group: each task is its own
    check_splits_disjoint([_spec("a", "train", ""), _spec("b", "heldout", "")])


def test_every_registered_source_is_covered():
    assert set(SOURCES) == set(BUILDERS)
