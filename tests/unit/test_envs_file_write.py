"""The file-write family: many distinct instances, held-out words and file names never seen in training."""

from __future__ import annotations

import pytest

from harness_rl.envs.sources import get_builder
from harness_rl.envs.sources.file_write import HELDOUT_STEMS, TRAIN_STEMS, FileWriteBuilder
from harness_rl.envs.splits import check_splits_disjoint


def stem(task) -> str:
    return task.metadata["file"].rsplit(".", 1)[0]


def test_splits_share_no_word_and_no_file_name():
    builder = get_builder("file_write")
    train, heldout = list(builder.build(split="train")), list(builder.build(split="heldout"))
    assert len(train) >= 100 and len(heldout) >= 40
    assert not {t.metadata["word"] for t in train} & {t.metadata["word"] for t in heldout}
    assert {stem(t) for t in train} <= set(TRAIN_STEMS) and {stem(t) for t in heldout} <= set(HELDOUT_STEMS)
    assert not set(TRAIN_STEMS) & set(HELDOUT_STEMS)
    check_splits_disjoint(train + heldout)
    assert all(t.source == "file_write" and t.group == t.metadata["word"] for t in train + heldout)
    assert all(t.metadata["word"] in t.instruction and t.metadata["file"] in t.instruction for t in heldout)


def test_same_seed_same_tasks_and_a_word_keeps_its_split_across_seeds():
    builder = FileWriteBuilder()
    first = [(t.id, t.instruction) for t in builder.build(seed=3)]
    assert first == [(t.id, t.instruction) for t in builder.build(seed=3)]
    other = {t.id: t.split for t in builder.build(seed=4)}
    assert {t.id: t.split for t in builder.build(seed=3)} == other


def test_heldout_fraction_and_n_are_checked():
    assert len(list(FileWriteBuilder(heldout_fraction=0.5).build(split="heldout"))) > 90
    assert len(list(FileWriteBuilder().build(n=5, split="train"))) == 5
    with pytest.raises(ValueError, match="heldout_fraction"):
        FileWriteBuilder(heldout_fraction=1.0)
    with pytest.raises(ValueError, match="asked for 10000"):
        list(FileWriteBuilder().build(n=10000))
    with pytest.raises(ValueError, match="split 'dev'"):
        list(FileWriteBuilder().build(split="dev"))
