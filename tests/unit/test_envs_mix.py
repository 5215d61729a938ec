"""Task mixes: sources are built into the cache once and reused, draws follow source and difficulty weights,
leaking splits and duplicate ids are refused, and the training config composes into a sampler."""

from __future__ import annotations

from collections import Counter

import pytest

from harness_rl.envs import write_task_dir
from harness_rl.envs.build import ensure_built
from harness_rl.envs.mix import SourceMix, TaskMix, load_mix
from harness_rl.envs.spec import TaskSpec
from harness_rl.envs.splits import SplitLeakError
from harness_rl.rollout.worker import TaskSampler
from harness_rl.sandbox.base import hidden_from_sandboxes


def _spec(task_id, difficulty="easy", split="train", group="", source="x"):
    return TaskSpec(id=task_id, instruction="i", workspace={}, tests={"test.sh": ""}, solution={"solve.sh": ""},
                    difficulty=difficulty, category="c", source=source, split=split, group=group)  # fmt: skip


def test_ensure_built_builds_once_then_reuses(tmp_path):
    first = ensure_built("smoke", tmp_path)
    marker = first / "smoke-00-hello" / "instruction.md"
    stamp = marker.stat().st_mtime_ns
    assert ensure_built("smoke", tmp_path) == first and marker.stat().st_mtime_ns == stamp
    assert ensure_built("smoke", tmp_path, seed=1) != first  # another build, another folder
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == sorted(
        [first.name, ensure_built("smoke", tmp_path, seed=1).name]
    )
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_mix_weights_sources_and_difficulties(tmp_path):
    for i in range(6):
        write_task_dir(_spec(f"a-easy-{i}", "easy", source="a"), tmp_path / "a")
    for i in range(2):
        write_task_dir(_spec(f"a-hard-{i}", "hard", source="a"), tmp_path / "a")
    write_task_dir(_spec("a-held", "hard", split="heldout", source="a"), tmp_path / "a")
    for i in range(3):
        write_task_dir(_spec(f"b-{i}", "medium", source="b"), tmp_path / "b")
    mix = TaskMix(
        (
            SourceMix("a", weight=3.0, folder=str(tmp_path / "a")),
            SourceMix("b", weight=1.0, folder=str(tmp_path / "b")),
        ),
        split="train",
        difficulty_weights={"easy": 1.0, "medium": 1.0, "hard": 3.0},
    )
    tasks, weights = load_mix(mix, tmp_path / "cache")
    assert "a-held" not in {t.id for t in tasks}
    share = {t.id: w for t, w in zip(tasks, weights, strict=True)}
    assert sum(weights) == pytest.approx(1.0)
    assert sum(w for i, w in share.items() if i.startswith("b-")) == pytest.approx(0.25)
    # within a: 6 easy at weight 1 and 2 hard at weight 3 -> hard tasks get half of a's draws
    assert sum(w for i, w in share.items() if i.startswith("a-hard")) == pytest.approx(0.75 * 0.5)
    assert (tmp_path / "a").resolve() in hidden_from_sandboxes()
    sampler = TaskSampler(tasks, seed=0, weights=weights)
    draws = Counter(sampler.draw().id.split("-")[1] for _ in range(4000))
    assert draws["easy"] / 4000 == pytest.approx(0.375, abs=0.04)  # seeded: the same draws every run


def test_mix_refuses_leaks_duplicates_and_empty(tmp_path):
    write_task_dir(_spec("t1", split="train", group="g"), tmp_path / "leak")
    write_task_dir(_spec("t2", split="heldout", group="g"), tmp_path / "leak")
    with pytest.raises(SplitLeakError):
        load_mix(TaskMix((SourceMix("x", folder=str(tmp_path / "leak")),)), tmp_path)
    write_task_dir(_spec("t1"), tmp_path / "other")
    mix = TaskMix((SourceMix("x", folder=str(tmp_path / "other")), SourceMix("y", folder=str(tmp_path / "other"))))
    with pytest.raises(ValueError, match="more than one source"):
        load_mix(mix, tmp_path)
    with pytest.raises(ValueError, match="no runnable task"):
        load_mix(TaskMix((SourceMix("x", folder=str(tmp_path / "other")),), split="heldout"), tmp_path)
    with pytest.raises(ValueError, match="unknown labels"):
        TaskMix((SourceMix("x"),), difficulty_weights={"brutal": 1.0})


def test_sampler_default_weights_follow_difficulty_labels():
    from harness_rl.envs.task import Task

    tasks = [Task(id=f"e{i}", instruction="", difficulty="easy") for i in range(3)] + [
        Task(id="h", instruction="", difficulty="hard")
    ]
    sampler = TaskSampler(tasks, seed=0, difficulty_weights={"easy": 0.0, "hard": 1.0})
    assert {sampler.draw().id for _ in range(50)} == {"h"}
    with pytest.raises(ValueError):
        TaskSampler(tasks, seed=0, weights=[0, 0, 0, 0])


def test_config_composes_into_a_sampler_of_the_split(tmp_path):
    from harness_rl.config.compose import compose_config
    from harness_rl.launch.components import build_task_sampler, rollout_settings

    cfg = compose_config([f"paths.tasks_cache_dir={tmp_path}", "tasks.efficiency_bonus=0.05"])
    sampler = build_task_sampler(cfg, seed=0)
    # The default mix is the file-write family: every training task of it, none held out.
    assert len(sampler.tasks) == 163 and {t.split for t in sampler.tasks} == {"train"}
    assert all(t.task_dir is not None and t.task_dir.is_relative_to(tmp_path) for t in sampler.tasks)
    assert rollout_settings(cfg).efficiency_bonus == 0.05
    held = compose_config([f"paths.tasks_cache_dir={tmp_path}", "tasks.split=heldout"])
    assert {t.id for t in build_task_sampler(held, seed=0).tasks}.isdisjoint({t.id for t in sampler.tasks})
    adapters = compose_config(["tasks=adapters"])
    weights = adapters.tasks.difficulty_weights
    assert weights.medium > weights.easy and weights.hard > weights.easy
