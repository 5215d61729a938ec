"""Tasks: the task format (Harbor-style folders), task sources, verifiers, task mixes and rewards."""

from harness_rl.envs.reward import MAX_EFFICIENCY_BONUS, compute_group_rewards
from harness_rl.envs.smoke import SmokeTaskSource, load_smoke_tasks
from harness_rl.envs.spec import DIFFICULTIES, TaskSpec
from harness_rl.envs.task import Task, TaskSource, lay_out_workspace
from harness_rl.envs.taskdir import TaskFormatError, load_task_dirs, read_task_dir, write_task_dir
from harness_rl.envs.testrun import OracleResult, run_empty_attempt, run_oracle, run_tests
from harness_rl.envs.verify import VerifierResult, verify

__all__ = [
    "DIFFICULTIES",
    "MAX_EFFICIENCY_BONUS",
    "OracleResult",
    "SmokeTaskSource",
    "Task",
    "TaskFormatError",
    "TaskSource",
    "TaskSpec",
    "VerifierResult",
    "compute_group_rewards",
    "lay_out_workspace",
    "load_smoke_tasks",
    "load_task_dirs",
    "read_task_dir",
    "run_empty_attempt",
    "run_oracle",
    "run_tests",
    "verify",
    "write_task_dir",
]
