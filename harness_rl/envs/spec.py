"""TaskSpec: one generated task, in memory, before it is written as a Harbor-style task folder.

Every task source (data analysis, repositories, synthetic environments) yields TaskSpecs; ``taskdir`` writes
them as folders and reads folders back into the runtime ``Task``. The folder layout follows Harbor's:

    <task id>/
      instruction.md          the text given to the harness
      task.toml               metadata: difficulty, category, source, split, protected paths, time limits
      environment/workspace/  the agent's starting workspace (copied into the rollout's workspace)
      tests/test.sh           the verifier, made visible only after the harness exits
      solution/solve.sh       the oracle

The contract of the two scripts (what ``validate`` and the rollout worker rely on):

- ``tests/test.sh`` runs with bash, cwd = the workspace in its final state, and the environment
  ``HRL_WORKSPACE`` (the workspace), ``HRL_TESTS_DIR`` (the tests folder, read-only), ``HRL_LOGS_DIR`` (a
  writable folder), ``HRL_PYTHON`` (an interpreter with this project's dependencies: pandas, pytest) and
  ``HRL_TOOL_CALLS`` (the rollout's tool calls; 0 for the oracle and the empty attempt; unset when unknown).
  It writes ``$HRL_LOGS_DIR/reward.json`` as ``{"reward": x}`` with x in [0, 1] (Harbor's
  ``reward.txt`` holding just the number is accepted too) and exits 0. Any other ending (crash, timeout, no
  reward file) makes the rollout unscorable, never reward 0. Scripts should default the variables to Harbor's
  fixed paths (``${HRL_TESTS_DIR:-/tests}``, ``${HRL_LOGS_DIR:-/logs/verifier}``, ``${HRL_WORKSPACE:-/app}``)
  so an exported task also runs under Harbor. The working directory is the agent's, so run Python as
  ``"$HRL_PYTHON" -I`` (and pytest with ``--rootdir "$HRL_TESTS_DIR"``) so that nothing the agent left in the
  workspace (a module of the same name, a conftest.py) changes what the verifier runs. The tests folder is a
  read-only copy; write to ``$HRL_LOGS_DIR``.
- ``solution/solve.sh`` runs with bash, cwd = a fresh copy of the starting workspace, ``HRL_SOLUTION_DIR``
  set to the solution folder, and turns the workspace into a solved one. A task is valid only when the
  verifier gives 1.0 after the oracle and less than 1.0 on the untouched workspace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DIFFICULTIES = ("easy", "medium", "hard")


@dataclass(frozen=True)
class TaskSpec:
    """One task as a source generates it.

    Attributes:
        id: Unique, stable, filesystem-safe id (``[a-z0-9][a-z0-9._-]*``); the folder name.
        instruction: The text given to the harness (instruction.md).
        workspace: The agent's starting files, relative path -> content (environment/workspace/).
        tests: Verifier files, relative path -> content; must hold ``test.sh`` (tests/).
        solution: Oracle files, relative path -> content; must hold ``solve.sh`` (solution/).
        difficulty: "easy", "medium" or "hard".
        category: What kind of work, e.g. "data-analysis", "bug-fix", "trajectory-qa".
        source: The source that built it ("data", "repo", "synthetic", "smoke", "harbor").
        split: Named split, e.g. "train" or "heldout" (a source may define more, see its module).
        group: Dedup key: tasks sharing a group (e.g. one dataset and one question template) must all be in
            the same split, so no held-out task has a near twin in training.
        protected_paths: Workspace-relative paths the agent must not modify or delete (task inputs); the
            safety gate and the verifier both know them.
        agent_timeout_s: Wall-clock limit for the harness on this task.
        verifier_timeout_s: Wall-clock limit for tests/test.sh.
        tags: Free-form labels for filtering.
        metadata: Source-specific facts written to task.toml under ``[harness_rl.metadata]`` (dataset name,
            template, project, mutation operator, ...); JSON/TOML-serialisable values only.
    """

    id: str
    instruction: str
    workspace: Mapping[str, str | bytes]
    tests: Mapping[str, str | bytes]
    solution: Mapping[str, str | bytes]
    difficulty: str
    category: str
    source: str
    split: str
    group: str
    protected_paths: tuple[str, ...] = ()
    agent_timeout_s: float = 600.0
    verifier_timeout_s: float = 120.0
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"task {self.id}: difficulty {self.difficulty!r} is not one of {DIFFICULTIES}")
        if "test.sh" not in self.tests:
            raise ValueError(f"task {self.id}: tests/ must contain test.sh")
        if "solve.sh" not in self.solution:
            raise ValueError(f"task {self.id}: solution/ must contain solve.sh")
