"""Task folders: a TaskSpec written as a Harbor-style folder reads back as the same task; bad folders fail with
the file and the field named; the verifier runs test.sh in the sandbox and anything but a valid reward file
is unscorable, never 0; the oracle solves and the empty attempt does not."""

from __future__ import annotations

import stat
import tomllib

import pytest

from harness_rl.envs import (
    TaskFormatError,
    TaskSpec,
    load_task_dirs,
    read_task_dir,
    run_empty_attempt,
    run_oracle,
    verify,
    write_task_dir,
)
from harness_rl.envs.sources.smoke import smoke_spec
from harness_rl.envs.task import lay_out_workspace
from harness_rl.sandbox.base import hidden_from_sandboxes
from harness_rl.sandbox.local import LocalSandbox

WRITE_REWARD = 'echo "{\\"reward\\": %s}" > "$HRL_LOGS_DIR/reward.json"\n'


def spec(task_id: str = "t-1", test_sh: str = WRITE_REWARD % 1, **kw) -> TaskSpec:
    fields = dict(
        id=task_id,
        instruction="Do the thing.\n",
        workspace={"data.csv": "a,b\n1,2\n", "sub/blob.bin": b"\x00\xff"},
        tests={"test.sh": test_sh, "helper.py": "print(1)\n"},
        solution={"solve.sh": "echo solved > answer.txt\n"},
        difficulty="medium",
        category="data-analysis",
        source="data",
        split="heldout",
        group="iris/mean",
        protected_paths=("data.csv",),
        agent_timeout_s=300.0,
        verifier_timeout_s=30.0,
        tags=("pandas",),
        metadata={"dataset": "iris", "rows": 150},
    )
    fields.update(kw)
    return TaskSpec(**fields)


def test_written_folder_has_harbor_layout_and_reads_back(tmp_path):
    folder = write_task_dir(spec(), tmp_path)
    assert folder == tmp_path / "t-1"
    assert (folder / "instruction.md").read_text() == "Do the thing.\n"
    assert (folder / "environment" / "workspace" / "sub" / "blob.bin").read_bytes() == b"\x00\xff"
    for script in ("tests/test.sh", "solution/solve.sh"):
        assert (folder / script).stat().st_mode & stat.S_IXUSR
    doc = tomllib.loads((folder / "task.toml").read_text())
    assert doc["metadata"] == {"difficulty": "medium", "category": "data-analysis", "tags": ["pandas"],
                               "author_name": "harness-rl"}  # fmt: skip
    assert doc["verifier"]["timeout_sec"] == 30.0 and doc["agent"]["timeout_sec"] == 300.0
    assert doc["harness_rl"]["group"] == "iris/mean" and doc["harness_rl"]["metadata"]["rows"] == 150
    task = read_task_dir(folder)
    assert (task.id, task.split, task.source, task.group, task.difficulty) == (
        "t-1", "heldout", "data", "iris/mean", "medium")  # fmt: skip
    assert task.protected_paths == ("data.csv",) and task.tags == ("pandas",)
    assert task.verifier_timeout_s == 30.0 and task.metadata == {"dataset": "iris", "rows": 150}
    assert folder.resolve() in hidden_from_sandboxes()
    ws = lay_out_workspace(task, tmp_path / "ws")
    assert (ws / "data.csv").read_text() == "a,b\n1,2\n" and (ws / "sub" / "blob.bin").read_bytes() == b"\x00\xff"


def test_write_is_atomic_and_refuses_or_replaces_existing(tmp_path):
    write_task_dir(spec(), tmp_path)
    with pytest.raises(FileExistsError):
        write_task_dir(spec(), tmp_path)
    write_task_dir(spec(instruction="New.\n"), tmp_path, overwrite=True)
    assert (tmp_path / "t-1" / "instruction.md").read_text() == "New.\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t-1"]  # no temp or old folder left behind
    with pytest.raises(TaskFormatError, match="escape|relative"):
        write_task_dir(spec(task_id="t-2", workspace={"../escape": "x"}), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t-1"]


@pytest.mark.parametrize("bad_id", ["", "Upper", ".hidden", "a/b", "a b", "x" * 201, "../up"])
def test_unsafe_ids_are_refused(tmp_path, bad_id):
    with pytest.raises(TaskFormatError, match="safe folder name"):
        write_task_dir(spec(task_id=bad_id), tmp_path)


def test_unserialisable_metadata_names_the_field(tmp_path):
    with pytest.raises(TaskFormatError, match="task.toml"):
        write_task_dir(spec(metadata={"x": None}), tmp_path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda f: (f / "tests" / "test.sh").unlink(), "test.sh: missing"),
        (lambda f: (f / "instruction.md").unlink(), "instruction.md: missing"),
        (lambda f: _edit_toml(f, 'difficulty = "medium"', 'difficulty = "brutal"'), "metadata.difficulty"),
        (lambda f: _edit_toml(f, 'split = "heldout"', ""), "harness_rl.split: missing"),
        (lambda f: _edit_toml(f, "timeout_sec = 30.0", 'timeout_sec = "soon"'), "verifier.timeout_sec: expected"),
        (lambda f: _edit_toml(f, 'protected_paths = [\n    "data.csv",\n]', "protected_paths = [1]"),
         "harness_rl.protected_paths"),
        (lambda f: _edit_toml(f, "[agent]", "[agent"), "not valid TOML"),
    ],
)  # fmt: skip
def test_bad_folders_fail_naming_file_and_field(tmp_path, edit, message):
    folder = write_task_dir(spec(), tmp_path / "root")
    edit(folder)
    with pytest.raises(TaskFormatError, match=message.replace("[", r"\[")) as info:
        load_task_dirs(tmp_path / "root")
    assert str(folder) in str(info.value)


def _edit_toml(folder, old, new):
    path = folder / "task.toml"
    text = path.read_text()
    assert old in text, text
    path.write_text(text.replace(old, new))


def test_load_filters_split_and_skips_partial_writes(tmp_path):
    write_task_dir(spec(task_id="a"), tmp_path)
    write_task_dir(spec(task_id="b", split="train"), tmp_path)
    (tmp_path / ".c.tmp123").mkdir()
    assert [t.id for t in load_task_dirs(tmp_path)] == ["a", "b"]
    assert [t.id for t in load_task_dirs(tmp_path, split="train")] == ["b"]
    assert tmp_path.resolve() in hidden_from_sandboxes()


def _verify(tmp_path, test_sh, timeout_s=None):
    task = read_task_dir(write_task_dir(spec(test_sh=test_sh), tmp_path / "tasks"))
    ws = lay_out_workspace(task, tmp_path / "r" / "workspace")
    return verify(task, ws, rollout_dir=tmp_path / "r", timeout_s=timeout_s)


@pytest.mark.parametrize(
    ("test_sh", "score"),
    [
        (WRITE_REWARD % 1, 1.0),
        (WRITE_REWARD % 0.25, 0.25),
        ('echo 0 > "$HRL_LOGS_DIR/reward.txt"\n', 0.0),  # Harbor's reward.txt
        # the contract's variables: cwd is the workspace, the tests folder holds the helper
        ('test "$PWD" = "$HRL_WORKSPACE" && test -f data.csv && test -f "$HRL_TESTS_DIR/helper.py" && '
         '"$HRL_PYTHON" -c "import pandas" && ' + WRITE_REWARD % 1, 1.0),
    ],
)  # fmt: skip
def test_tests_verifier_reads_reward(tmp_path, test_sh, score):
    result = _verify(tmp_path, test_sh)
    assert result.error is None and result.score == score
    assert not (tmp_path / "r" / "verifier" / "tests").exists()  # the copy is gone after the run


@pytest.mark.parametrize(
    ("test_sh", "reason"),
    [
        ("exit 3\n", "exited 3"),
        ("true\n", "no reward"),
        ('echo \'{"score": 1}\' > "$HRL_LOGS_DIR/reward.json"\n', "no 'reward'"),
        (WRITE_REWARD % 1.5, "outside"),
        (WRITE_REWARD % "true", "not a finite number"),
        ('echo nan > "$HRL_LOGS_DIR/reward.txt"\n', "finite"),
        (WRITE_REWARD % 1 + "exit 1\n", "exited 1"),
    ],
)
def test_failing_verifier_is_unscorable_not_zero(tmp_path, test_sh, reason):
    result = _verify(tmp_path, test_sh)
    assert result.score is None and reason in result.error


def test_timing_out_verifier_is_unscorable(tmp_path):
    result = _verify(tmp_path, "sleep 60\n", timeout_s=1)
    assert result.score is None and "timed out" in result.error


def test_oracle_passes_and_empty_attempt_fails_on_smoke_task(tmp_path):
    task = read_task_dir(write_task_dir(smoke_spec("smoke-x", "out file.txt", "apple", "train"), tmp_path / "t"))
    oracle = run_oracle(task, tmp_path / "oracle")
    assert oracle.error is None and oracle.passed
    assert (oracle.workspace / "out file.txt").read_text() == "apple\n"
    empty = run_empty_attempt(task, tmp_path / "empty")
    assert empty.error is None and empty.score == 0.0


def test_failing_oracle_is_reported(tmp_path):
    task = read_task_dir(write_task_dir(spec(solution={"solve.sh": "exit 7\n"}), tmp_path / "t"))
    oracle = run_oracle(task, tmp_path / "oracle", sandbox=LocalSandbox(use_bwrap=False, address_space_bytes=None))
    assert not oracle.passed and "exited 7" in oracle.error


def test_tool_calls_reach_the_verifier(tmp_path):
    test_sh = 'if [ "${HRL_TOOL_CALLS:-unset}" = 3 ]; then r=1; else r=0; fi\n' + WRITE_REWARD % "$r"
    task = read_task_dir(write_task_dir(spec(test_sh=test_sh), tmp_path / "tasks"))
    ws = lay_out_workspace(task, tmp_path / "r" / "workspace")
    assert verify(task, ws, rollout_dir=tmp_path / "r", tool_calls=3).score == 1.0
    assert verify(task, ws, rollout_dir=tmp_path / "r", tool_calls=2).score == 0.0
    assert verify(task, ws, rollout_dir=tmp_path / "r").score == 0.0  # unknown: unset
