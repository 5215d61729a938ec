"""Tasks lay out safely, verifiers score 1/0 and turn their own crashes or timeouts into None, and group
rewards add the efficiency bonus only to correct rollouts below the group's mean tool calls."""

from __future__ import annotations

import os
import sys

import pytest

from harness_rl.envs import (
    MAX_EFFICIENCY_BONUS,
    SmokeTaskSource,
    Task,
    compute_group_rewards,
    lay_out_workspace,
    load_smoke_tasks,
    verify,
)
from harness_rl.envs.smoke import smoke_task


def test_smoke_tasks_are_bundled_varied_and_split():
    tasks = load_smoke_tasks()
    assert 10 <= len(tasks) <= 20
    assert len({t.id for t in tasks}) == len(tasks)
    assert len({t.verifier["word"] for t in tasks}) == len(tasks)
    assert len({t.verifier["path"] for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.instruction == f"Create a file named {t.verifier['path']} that contains the word {t.verifier['word']}."
    assert SmokeTaskSource().tasks("train") and SmokeTaskSource().tasks("heldout")
    assert len(load_smoke_tasks("train")) + len(load_smoke_tasks("heldout")) == len(tasks)


def test_lay_out_workspace_writes_files_and_refuses_escapes(tmp_path):
    task = Task(id="t", instruction="i", verifier={"kind": "file_contains", "path": "a", "word": "w"},
                files={"in.txt": "data", "sub/deep.txt": "x"})  # fmt: skip
    ws = lay_out_workspace(task, tmp_path / "ws")
    assert (ws / "in.txt").read_text() == "data" and (ws / "sub" / "deep.txt").read_text() == "x"
    with pytest.raises(FileExistsError):
        lay_out_workspace(task, ws)
    for bad in ("../evil.txt", "/etc/evil", "a/../../evil"):
        t = Task(id="b", instruction="i", verifier={}, files={bad: "x"})
        with pytest.raises(ValueError):
            lay_out_workspace(t, tmp_path / f"ws-{abs(hash(bad))}")
    assert not (tmp_path / "evil.txt").exists()


def test_task_from_dict_rejects_unknown_keys():
    t = Task.from_dict({"id": "a", "instruction": "i", "verifier": {"kind": "command", "argv": ["true"]},
                        "protected_paths": ["in.txt"]})  # fmt: skip
    assert t.protected_paths == ("in.txt",)
    with pytest.raises(TypeError):
        Task.from_dict({"id": "a", "instruction": "i", "verifier": {}, "bogus": 1})


@pytest.mark.parametrize(
    ("content", "expected"),
    [("apple\n", 1.0), ("An APPLE a day", 1.0), ("pineapples", 0.0), ("banana", 0.0), (None, 0.0)],
)
def test_file_contains_verifier_pass_and_fail(tmp_path, content, expected):
    task = smoke_task("t", "out.txt", "apple")
    if content is not None:
        (tmp_path / "out.txt").write_text(content)
    result = verify(task, tmp_path)
    assert result.error is None and result.score == expected


def test_file_contains_does_not_read_devices_or_folders(tmp_path):
    os.symlink("/dev/zero", tmp_path / "out.txt")
    (tmp_path / "dir.txt").mkdir()
    assert verify(smoke_task("t", "out.txt", "apple"), tmp_path, timeout_s=10).score == 0.0
    assert verify(smoke_task("t", "dir.txt", "apple"), tmp_path).score == 0.0


def _command_task(code: str, timeout_s: float = 10) -> Task:
    return Task(id="c", instruction="i", verifier={"kind": "command", "argv": [sys.executable, "-c", code],
                                                   "timeout_s": timeout_s})  # fmt: skip


@pytest.mark.parametrize(
    ("code", "score"),
    [("print('log line'); print(1)", 1.0), ("print('{\"score\": 0.25}')", 0.25), ("print(0)", 0.0)],
)
def test_command_verifier_scores(tmp_path, code, score):
    assert verify(_command_task(code), tmp_path).score == score


@pytest.mark.parametrize(
    "code",
    [
        "raise RuntimeError('verifier bug')",
        "pass",
        "print('maybe')",
        "print(2.5)",
        "print('nan')",
        "import sys; print(1); sys.exit(3)",
    ],  # fmt: skip
)
def test_crashing_or_silent_verifier_is_unscorable_not_zero(tmp_path, code):
    result = verify(_command_task(code), tmp_path)
    assert result.score is None and not result.scorable and result.error


def test_timing_out_verifier_is_unscorable_and_killed_fast(tmp_path):
    result = verify(_command_task("import time; time.sleep(60)", timeout_s=0.5), tmp_path)
    assert result.score is None and "timed out" in result.error
    assert result.seconds < 5


def test_missing_verifier_program_is_unscorable(tmp_path):
    task = Task(id="m", instruction="i", verifier={"kind": "command", "argv": ["/nonexistent/verifier"]})
    assert verify(task, tmp_path).score is None


def test_rewards_correctness_and_bonus_scale():
    # mean tool calls over the group = (2 + 6 + 4 + 4) / 4 = 4
    rewards = compute_group_rewards([1.0, 1.0, 0.0, 1.0], [2, 6, 4, 4])
    assert rewards[0] == pytest.approx(1.0 + MAX_EFFICIENCY_BONUS * (4 - 2) / 4)
    assert rewards[1] == 1.0  # correct but above the mean: no penalty, no bonus
    assert rewards[2] == 0.0
    assert rewards[3] == 1.0  # at the mean: no bonus


def test_wrong_rollouts_never_get_a_bonus_and_none_stays_none():
    rewards = compute_group_rewards([0.0, None, 0.5, 1.0], [0, 0, 0, 10])
    assert rewards == [0.0, None, 0.5, 1.0]
    # unscorable rollouts do not count towards the mean: mean over (10, 2) = 6
    rewards = compute_group_rewards([1.0, None, 1.0], [10, 0, 2])
    assert rewards[0] == 1.0 and rewards[1] is None
    assert rewards[2] == pytest.approx(1.0 + 0.1 * (6 - 2) / 6)


def test_bonus_is_bounded_and_below_correctness_gap():
    rewards = compute_group_rewards([1.0, 0.0, 0.0], [0, 50, 50])
    assert rewards[0] == pytest.approx(1.0 + MAX_EFFICIENCY_BONUS)
    assert all(r is None for r in compute_group_rewards([None, None], [1, 2]))
    assert compute_group_rewards([], []) == []


@pytest.mark.parametrize(("scores", "calls"), [([1.0], [1, 2]), ([1.0], [-1]), ([1.5], [1])])
def test_reward_inputs_are_validated(scores, calls):
    with pytest.raises(ValueError):
        compute_group_rewards(scores, calls)
