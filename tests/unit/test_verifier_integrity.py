"""A verifier cannot be fooled through the workspace's links: links out of the workspace (symbolic or hard) are
deleted before it runs, and its expected files appear at a path drawn only when it starts."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from harness_rl.envs import testrun
from harness_rl.envs.links import remove_escaping_links
from harness_rl.envs.spec import TaskSpec
from harness_rl.envs.task import lay_out_workspace
from harness_rl.envs.taskdir import read_task_dir, write_task_dir
from harness_rl.envs.verify import verify
from harness_rl.sandbox import LocalSandbox, bwrap_usable

EXPECTED = "the-expected-answer-4c1e\n"

# 1.0 when answer.txt holds the expected output; also says where its tests folder was.
TEST_SH = textwrap.dedent("""\
    echo "$HRL_TESTS_DIR" > "$HRL_LOGS_DIR/tests_dir.txt"
    reward=0
    if cmp -s answer.txt "$HRL_TESTS_DIR/expected.txt"; then reward=1; fi
    echo "{\\"reward\\": $reward}" > "$HRL_LOGS_DIR/reward.json"
""")

SANDBOXES = [
    pytest.param(False, id="plain"),
    pytest.param(True, id="bwrap", marks=pytest.mark.skipif(not bwrap_usable(), reason="needs bubblewrap")),
]


@pytest.fixture
def task(tmp_path):
    spec = TaskSpec(
        id="expected-output",
        instruction="Write answer.txt.",
        workspace={"input.txt": "in\n"},
        tests={"test.sh": TEST_SH, "expected.txt": EXPECTED},
        solution={"solve.sh": f"printf '{EXPECTED}' > answer.txt\n"},
        difficulty="easy",
        category="test",
        source="test",
        split="train",
        group="g",
    )
    write_task_dir(spec, tmp_path / "tasks")
    return read_task_dir(tmp_path / "tasks" / spec.id, hide=False)


def _verify(task, rollout: Path, use_bwrap: bool) -> float | None:
    sandbox = LocalSandbox(use_bwrap=use_bwrap, address_space_bytes=None)
    result = verify(task, rollout / "workspace", sandbox=sandbox, rollout_dir=rollout, timeout_s=60)
    assert result.error is None, result.error
    return result.score


@pytest.mark.parametrize("use_bwrap", SANDBOXES)
def test_the_right_answer_scores_1_and_a_link_inside_the_workspace_is_kept(task, tmp_path, use_bwrap):
    ws = lay_out_workspace(task, tmp_path / "r0" / "workspace")
    (ws / "out").mkdir()
    (ws / "out" / "real.txt").write_text(EXPECTED)
    (ws / "answer.txt").symlink_to("out/real.txt")
    assert _verify(task, tmp_path / "r0", use_bwrap) == 1.0
    assert (ws / "answer.txt").is_symlink()


@pytest.mark.parametrize("use_bwrap", SANDBOXES)
def test_a_symlink_to_where_the_verifier_copies_its_expected_file_scores_0(task, tmp_path, use_bwrap):
    rollout = tmp_path / "r0"
    ws = lay_out_workspace(task, rollout / "workspace")
    # Dangling while the agent runs; before this change it resolved once the verifier copied its tests there.
    (ws / "answer.txt").symlink_to(rollout / "verifier" / "tests" / "expected.txt")
    assert _verify(task, rollout, use_bwrap) == 0.0
    assert not (ws / "answer.txt").is_symlink()


def test_the_expected_files_path_is_drawn_when_the_verifier_starts(task, tmp_path, monkeypatch):
    """Even with the link cleaner off, a link aimed at the old fixed path finds nothing: each run copies the
    tests to a fresh random folder under verifier/, gone once the verifier ended."""
    monkeypatch.setattr(testrun, "remove_escaping_links", lambda ws: [])
    seen = []
    for i in range(2):
        rollout = tmp_path / f"r{i}"
        ws = lay_out_workspace(task, rollout / "workspace")
        (ws / "answer.txt").symlink_to(rollout / "verifier" / "tests" / "expected.txt")
        assert _verify(task, rollout, use_bwrap=False) == 0.0
        tests_dir = Path((rollout / "verifier" / "logs" / "tests_dir.txt").read_text().strip())
        assert tests_dir.parent == (rollout / "verifier").resolve() and tests_dir.name != "tests"
        assert not tests_dir.exists()
        seen.append(tests_dir.name)
    assert seen[0] != seen[1]


@pytest.mark.parametrize("use_bwrap", SANDBOXES)
def test_a_hard_link_to_a_file_outside_the_workspace_is_removed(task, tmp_path, use_bwrap):
    rollout = tmp_path / "r0"
    ws = lay_out_workspace(task, rollout / "workspace")
    # A file outside the workspace that holds (or will hold) the expected output, e.g. one a later step writes.
    outside = tmp_path / "elsewhere" / "copy.txt"
    outside.parent.mkdir()
    outside.write_text(EXPECTED)
    os.link(outside, ws / "answer.txt")
    assert _verify(task, rollout, use_bwrap) == 0.0
    assert not (ws / "answer.txt").exists() and outside.read_text() == EXPECTED


def test_link_cleaner_keeps_links_inside_and_removes_every_kind_that_leaves(tmp_path):
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "a.txt").write_text("a")
    os.link(ws / "pkg" / "a.txt", ws / "a-again.txt")  # both names inside: kept
    (ws / "inside").symlink_to("pkg")  # a directory link that stays inside: kept
    (ws / "pkg" / "up").symlink_to("../pkg/a.txt")  # leaves and comes back in: kept
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "s.txt").write_text("s")
    (ws / "to_dir").symlink_to(tmp_path / "secret")  # a directory outside
    (ws / "pkg" / "dangling").symlink_to("/nonexistent/appears/later")  # dangling, outside
    (ws / "pkg" / "chain").symlink_to("../to_dir/s.txt")  # through another link that leaves
    (ws / "pkg" / "etc").symlink_to("/etc/passwd")
    os.link(tmp_path / "secret" / "s.txt", ws / "pkg" / "hard.txt")
    removed = remove_escaping_links(ws)
    assert removed == ["pkg/chain", "pkg/dangling", "pkg/etc", "pkg/hard.txt", "to_dir"]
    assert sorted(p.name for p in ws.rglob("*")) == ["a-again.txt", "a.txt", "inside", "pkg", "up"]
    assert (tmp_path / "secret" / "s.txt").read_text() == "s"  # only the link went, never its target
