"""Tasks: the task format, the bundled smoke tasks, verifiers and rewards."""

from harness_rl.envs.reward import MAX_EFFICIENCY_BONUS, compute_group_rewards
from harness_rl.envs.smoke import SmokeTaskSource, load_smoke_tasks
from harness_rl.envs.task import Task, TaskSource, lay_out_workspace
from harness_rl.envs.verify import VerifierResult, verify

__all__ = [
    "MAX_EFFICIENCY_BONUS",
    "SmokeTaskSource",
    "Task",
    "TaskSource",
    "VerifierResult",
    "compute_group_rewards",
    "lay_out_workspace",
    "load_smoke_tasks",
    "verify",
]
