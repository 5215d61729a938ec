"""The bundled trajectory corpus: its tool outputs are real (recording it again gives the same files), and the
synthetic source built from it yields every task type, in disjoint splits that are the same on every rebuild."""

from __future__ import annotations

from collections import Counter

import pytest

from harness_rl.envs.sources import synthetic
from harness_rl.envs.sources.synthetic import CORPUS_DIR, SyntheticBuilder
from scripts.record_trajectories import record_sessions
from scripts.trajectory_sessions import SESSIONS

pytestmark = pytest.mark.slow  # replays and checks about 50 tasks: a minute on a busy 2-core machine


def test_recording_the_sessions_again_reproduces_the_bundled_files(tmp_path):
    written = record_sessions(tmp_path)
    assert len(written) == len(SESSIONS)
    for path in written:
        assert path.read_text() == (CORPUS_DIR / path.name).read_text(), path.name


def test_the_bundled_corpus_yields_every_type_in_stable_disjoint_splits():
    tasks = list(SyntheticBuilder().build(seed=0))
    by_type = Counter(t.metadata["type"] for t in tasks)
    assert by_type["qa"] >= 12 and by_type["state"] >= 12 and by_type["budget"] >= 10 and by_type["fix"] >= 5
    assert {t.metadata["origin"] for t in tasks} == {"chat", "atif", "rollout"}
    assert len({t.id for t in tasks}) == len(tasks)
    splits_of: dict[str, set[str]] = {}
    for task in tasks:
        splits_of.setdefault(task.group, set()).add(task.split)
    assert all(len(s) == 1 for s in splits_of.values())
    assert {t.split for t in tasks} == {"train", "heldout"}
    synthetic._corpus.cache_clear()  # a real rebuild: replay and check everything again
    assert list(SyntheticBuilder().build(seed=0)) == tasks
