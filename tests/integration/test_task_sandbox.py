"""Acceptance: an agent process in the sandbox cannot read a task's tests/ or solution/ (not at the task folder,
not where the verifier or the oracle copy them), and the verifier can read its tests after the harness exits.

The layout is the training run's: one sandbox hiding the run folder, rollouts under ``run/rollouts/...``, task
folders loaded with ``load_task_dirs`` (which hides their root).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from harness_rl.envs import lay_out_workspace, load_task_dirs, run_oracle, verify, write_task_dir
from harness_rl.envs.spec import TaskSpec
from harness_rl.sandbox import LocalSandbox, SandboxLayout, base_env, bwrap_usable

pytestmark = pytest.mark.skipif(not bwrap_usable(), reason="needs bubblewrap (apt-get install bubblewrap)")

SECRET = "hrl-secret-9f3c1a"

# test.sh scores 1 only when it can read its own tests folder (the secret) and cannot see the solution.
TEST_SH = textwrap.dedent(f"""\
    set -eu
    secret=$(cat "$HRL_TESTS_DIR/expected.txt")
    reward=0
    if [ "$secret" = "{SECRET}" ] && [ ! -e "${{TASK_SOLUTION:-/nonexistent}}" ]; then reward=1; fi
    echo "{{\\"reward\\": $reward}}" > "$HRL_LOGS_DIR/reward.json"
""")

# The "agent": tries every place the tests or the solution could be, and searches the whole test folder tree
# for the secret; reports what it could read.
AGENT = textwrap.dedent("""\
    import json, os, sys
    paths, roots = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    seen = {}
    for p in paths:
        try:
            with open(p) as f:
                seen[p] = f.read()
        except OSError as e:
            seen[p] = None
    hits = []
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for name in files:
                try:
                    with open(os.path.join(dirpath, name), errors="replace") as f:
                        if "SECRET" in f.read():
                            hits.append(os.path.join(dirpath, name))
                except OSError:
                    pass
    listing = {r: (os.listdir(r) if os.path.isdir(r) else None) for r in roots}
    print(json.dumps({"read": seen, "hits": hits, "listing": listing}))
""").replace("SECRET", SECRET)


@pytest.fixture
def world():
    # Not under /tmp: the sandbox mounts the rollout's own /tmp over the host's, which would hide files there
    # whether or not the task folders are hidden, and make this test pass for the wrong reason.
    base = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else Path.home()
    with tempfile.TemporaryDirectory(prefix="hrl-task-sandbox-", dir=base) as tmp:
        yield _world(Path(tmp))


def _world(tmp_path):
    tasks_root = tmp_path / "tasks"
    spec = TaskSpec(
        id="secret-task",
        instruction="Write answer.txt.",
        workspace={"input.txt": "public\n"},
        tests={"test.sh": TEST_SH, "expected.txt": SECRET},
        solution={"solve.sh": f"echo {SECRET} > answer.txt\n", "notes.txt": SECRET},
        difficulty="easy",
        category="test",
        source="test",
        split="train",
        group="g",
    )
    write_task_dir(spec, tasks_root)
    (task,) = load_task_dirs(tasks_root)
    run_dir = tmp_path / "run"
    sandbox = LocalSandbox(use_bwrap=True, hidden_paths=(run_dir,), address_space_bytes=None)
    return tmp_path, task, run_dir, sandbox


def run_agent(sandbox, rollout_dir, task, paths, roots):
    layout = SandboxLayout.for_rollout(rollout_dir)
    lay_out_workspace(task, layout.workspace)
    out = rollout_dir / "agent.json"
    with open(out, "wb") as f:
        result = sandbox.run([sys.executable, "-c", AGENT, json.dumps([str(p) for p in paths]),
                              json.dumps([str(r) for r in roots])], layout, env=base_env(), timeout_s=60,
                             stdout=f)  # fmt: skip
    assert result.returncode == 0 and result.isolation == "bwrap"
    return json.loads(out.read_text())


def test_agent_cannot_read_tests_or_solution_and_verifier_can_after(world):
    tmp_path, task, run_dir, sandbox = world
    group = run_dir / "rollouts" / "h" / "g00000"
    # The first rollout of the group ends and is verified; its verifier copies tests/ into its folder.
    first = group / "r0"
    lay_out_workspace(task, first / "workspace")
    verdict = verify(task, first / "workspace", sandbox=sandbox, rollout_dir=first,
                     timeout_s=60)  # fmt: skip
    assert verdict.error is None and verdict.score == 1.0
    # An oracle attempt elsewhere copies solution/ (and tests/) into its own work folder.
    oracle = run_oracle(task, run_dir / "validate" / task.id, sandbox=sandbox)
    assert oracle.passed

    task_dir = task.task_dir
    secret_files = [
        task_dir / "tests" / "test.sh",
        task_dir / "tests" / "expected.txt",
        task_dir / "solution" / "solve.sh",
        task_dir / "solution" / "notes.txt",
        first / "verifier" / "tests" / "expected.txt",
        run_dir / "validate" / task.id / "oracle" / "solution" / "notes.txt",
        run_dir / "validate" / task.id / "verifier" / "tests" / "expected.txt",
    ]
    # The host itself can read the task folder (the check below is not vacuous).
    assert (task_dir / "tests" / "expected.txt").read_text() == SECRET
    report = run_agent(sandbox, group / "r1", task, secret_files, [tmp_path, task_dir.parent])
    assert report["read"] == {str(p): None for p in secret_files}
    assert report["hits"] == []
    assert report["listing"][str(task_dir.parent)] == []  # the tasks root is an empty tmpfs to the agent


def test_verifier_sees_tests_but_not_the_solution(world, monkeypatch):
    tmp_path, task, run_dir, sandbox = world
    rollout = run_dir / "r0"
    lay_out_workspace(task, rollout / "workspace")
    import harness_rl.envs.testrun as testrun

    # Point TASK_SOLUTION at the task's own solution folder: the verifier must not see it either.
    real_env = testrun.script_env
    monkeypatch.setattr(testrun, "script_env",
                        lambda **kw: {**real_env(**kw), "TASK_SOLUTION": str(task.task_dir / "solution")})  # fmt: skip
    verdict = verify(task, rollout / "workspace", sandbox=sandbox, rollout_dir=rollout, timeout_s=60)
    assert verdict.error is None and verdict.score == 1.0
    # Without the sandbox hiding it, the same script sees the solution and scores 0: the check above is real.
    plain = LocalSandbox(use_bwrap=False, address_space_bytes=None)
    rollout2 = tmp_path / "plain"
    lay_out_workspace(task, rollout2 / "workspace")
    assert verify(task, rollout2 / "workspace", sandbox=plain, rollout_dir=rollout2, timeout_s=60).score == 0.0
