"""The four synthetic task types generated from one replayed trajectory, each with its checker.

    qa       a question whose answer a read-only step of the trajectory printed; the workspace is the one that
             step saw, so the answer can be recomputed (check: normalised answer in ``answer.txt``).
    state    reach the final workspace state the trajectory reached (check: the changed files' contents, the
             deleted files' absence); oracle: the trajectory's calls replayed.
    fix      a command that failed in the trajectory and succeeded when it was run again later must succeed
             (check: it exits 0 and prints what the later run printed); oracle: the calls in between.
    budget   the state goal under a tool-call budget below what the trajectory used (check: state and
             ``HRL_TOOL_CALLS`` <= budget; no count makes the task unscorable).

Every candidate is a TaskSpec; the builder keeps it only if its oracle passes and the untouched workspace fails.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness_rl.envs.sources import synthetic_check
from harness_rl.envs.sources.synthetic_replay import (
    StepResult,
    normalise,
    run_action,
    same_output,
    snapshot,
    write_files,
)
from harness_rl.envs.sources.synthetic_trajectory import Action, Trajectory
from harness_rl.envs.spec import TaskSpec
from harness_rl.sandbox.base import Sandbox

KINDS = ("qa", "state", "fix", "budget")
CATEGORIES = {
    "qa": "trajectory-qa",
    "state": "trajectory-state",
    "fix": "trajectory-fix",
    "budget": "trajectory-budget",
}
ANSWER_FILE = "answer.txt"
MAX_QA_PER_TRAJECTORY = 3
MAX_ANSWER_CHARS = 60
ERROR_LINES_SHOWN = 12

_TEST_SH = """#!/usr/bin/env bash
# Verifier of a synthetic task (harness_rl.envs.sources.synthetic): check.py scores the workspace per check.json.
tests="${HRL_TESTS_DIR:-/tests}"
logs="${HRL_LOGS_DIR:-/logs/verifier}"
workspace="${HRL_WORKSPACE:-/app}"
mkdir -p "$logs"
exec "${HRL_PYTHON:-python3}" "$tests/check.py" "$tests/check.json" "$workspace" "$logs"
"""

_SOLVE_SH = """#!/usr/bin/env bash
# Oracle: replays the source trajectory's tool calls in order, one fresh shell each as the agent ran them;
# a call that failed in the trajectory fails here too and is passed over the same way.
solution="${HRL_SOLUTION_DIR:-/solution}"
export LC_ALL=C LANG=C TZ=UTC PYTHONDONTWRITEBYTECODE=1
for step in "$solution"/steps/*.sh; do
  [ -e "$step" ] || continue
  bash "$step" </dev/null >/dev/null 2>&1 || true
done
exit 0
"""


@dataclass(frozen=True)
class Replayed:
    """A trajectory replayed from its starting workspace.

    Attributes:
        trajectory: The source.
        states: ``states[i]`` is the workspace before action i; ``states[-1]`` after the last replayed one.
        results: What each replayed action printed and returned.
        trusted: Whether each replayed action reproduced its recorded output and exit status.
    """

    trajectory: Trajectory
    states: tuple[Mapping[str, str | bytes], ...]
    results: tuple[StepResult, ...]
    trusted: tuple[bool, ...]

    @property
    def complete(self) -> bool:
        """Every action was replayed and reproduced what was recorded."""
        return len(self.results) == len(self.trajectory.actions) and all(self.trusted)

    def changes(self, start: int, end: int) -> bool:
        return self.states[start] != self.states[end]


def replay(trajectory: Trajectory, sandbox: Sandbox | None = None) -> Replayed | None:
    """Replays the trajectory's replayable prefix in a temporary folder (in ``sandbox`` when given); None
    without a starting workspace."""
    if trajectory.workspace is None:
        return None
    states, results, trusted = [], [], []
    with tempfile.TemporaryDirectory(prefix="hrl-replay-") as tmp:
        root = Path(tmp)
        write_files(root, trajectory.workspace)
        states.append(snapshot(root))
        for action in trajectory.actions:
            if not action.replayable:
                break
            result = run_action(action, root, sandbox)
            results.append(result)
            trusted.append(_reproduced(action, result))
            states.append(snapshot(root))
    return Replayed(trajectory, tuple(states), tuple(results), tuple(trusted))


def _reproduced(action: Action, result: StepResult) -> bool:
    """Whether a replayed step did what was recorded: the same output for a success; for a failure, a failure
    (error wording differs between tool versions, and only the later success's output is ever checked)."""
    if action.write is not None:
        return True
    if result.exit_code != 0:
        return action.exit_code != 0 if action.exit_code is not None else not same_output(action.output, "")
    return action.exit_code in (None, 0) and same_output(action.output, result.output)


def oracle_files(actions: tuple[Action, ...] | list[Action]) -> dict[str, str]:
    """``solve.sh`` plus one step script per action (a file write copies its content from ``files/``)."""
    files = {"solve.sh": _SOLVE_SH}
    for n, action in enumerate(actions):
        if action.write is not None:
            path, content = action.write
            files[f"files/{n:03d}"] = content
            quoted, source = shlex.quote(path), f'"${{HRL_SOLUTION_DIR:-/solution}}/files/{n:03d}"'
            files[f"steps/{n:03d}.sh"] = f'mkdir -p "$(dirname {quoted})"\ncat {source} > {quoted}\n'
        else:
            files[f"steps/{n:03d}.sh"] = action.command + "\n"
    return files


def tests_files(check: dict, extra: Mapping[str, str | bytes] | None = None) -> dict[str, str | bytes]:
    """``test.sh``, ``check.py`` and ``check.json`` (plus ``extra``) for a tests folder."""
    return {
        "test.sh": _TEST_SH,
        "check.py": Path(synthetic_check.__file__).read_text(),
        "check.json": json.dumps(check, indent=1, sort_keys=True) + "\n",
        **(extra or {}),
    }


def _spec(traj: Trajectory, kind: str, n: int, **fields) -> TaskSpec:
    meta = {"trajectory": traj.id, "origin": traj.origin, "type": kind, **fields.pop("metadata", {})}
    return TaskSpec(
        id=f"syn-{kind}-{traj.id}-{n:02d}",
        category=CATEGORIES[kind],
        source="synthetic",
        split="train",
        group=traj.id,
        tags=("synthetic", kind),
        metadata=meta,
        **fields,
    )


# --- (1) question answering --------------------------------------------------------------------------------------


def _question(action: Action) -> tuple[str, bool]:
    """The question a step answers: the last question the agent wrote before it, else "what does it print"."""
    # Sentences end at ". ", "! " or a line break (a bare "." is a file name's dot).
    sentences = [part.strip() for line in action.thought.splitlines() for part in re.split(r"(?<=[.!?])\s+", line)]
    questions = [s for s in sentences if s.endswith("?") and len(s) > 1]
    if questions:
        return questions[-1], True
    return f"What does the shell command `{action.command}` print when run in this workspace?", False


def _printed_a_file(answer: str, files: Mapping[str, str | bytes]) -> bool:
    """Whether the answer is a whole file's text (a `cat`): a question worth asking needs more than that."""
    return any(isinstance(c, str) and normalise(c) == answer for c in files.values())


def qa_tasks(rep: Replayed) -> Iterator[TaskSpec]:
    """Questions answered by read-only, reproduced, successful steps that printed one short line."""
    traj, made = rep.trajectory, 0
    for i, (action, result) in enumerate(zip(traj.actions, rep.results, strict=False)):
        if made >= MAX_QA_PER_TRAJECTORY:
            return
        answer = normalise(result.output)
        if (
            action.command is None
            or not rep.trusted[i]
            or result.exit_code != 0
            or rep.changes(i, i + 1)
            or not answer
            or "\n" in answer
            or len(answer) > MAX_ANSWER_CHARS
            or answer in action.command
            or ANSWER_FILE in rep.states[i]
            or _printed_a_file(answer, rep.states[i])
        ):
            continue
        question, from_thought = _question(action)
        instruction = (
            f"Answer this question about the files in the current folder:\n\n{question}\n\n"
            f"Write only the answer (no explanation) to {ANSWER_FILE}."
        )
        workspace = dict(rep.states[i])
        solve = f"printf '%s\\n' {shlex.quote(answer)} > {ANSWER_FILE}\n"
        yield _spec(
            traj,
            "qa",
            made,
            instruction=instruction,
            workspace=workspace,
            tests=tests_files({"kind": "qa", "answer_file": ANSWER_FILE, "expected": answer}),
            solution={"solve.sh": "#!/usr/bin/env bash\n" + solve},
            difficulty="medium" if from_thought else "easy",
            protected_paths=tuple(sorted(workspace)),
            metadata={"step": i, "command": action.command},
        )
        made += 1


# --- (2) final state and (4) the same under a tool-call budget -------------------------------------------------


def _state_goal(rep: Replayed) -> tuple[dict[str, str | bytes], list[str], str] | None:
    start, final = rep.states[0], rep.states[-1]
    changed = {p: c for p, c in final.items() if start.get(p) != c}
    deleted = sorted(p for p in start if p not in final)
    if not changed and not deleted:
        return None
    lines = [f"- `{p}` ({'changed' if p in start else 'new'})" for p in sorted(changed)]
    lines += [f"- `{p}` (deleted)" for p in deleted]
    return changed, deleted, "\n".join(lines)


def _state_check(changed: Mapping[str, str | bytes], deleted: list[str], budget: int | None):
    names = {p: f"f{n:03d}" for n, p in enumerate(sorted(changed))}
    expected = {f"expected/{names[p]}": c for p, c in changed.items()}
    check = {"kind": "state", "files": names, "deleted": deleted, "max_tool_calls": budget}
    return tests_files(check, expected)


def state_tasks(rep: Replayed) -> Iterator[TaskSpec]:
    """The trajectory's goal, checked against the final state it reached, and the budgeted variant."""
    traj = rep.trajectory
    goal = _state_goal(rep) if rep.complete and traj.task.strip() else None
    if goal is None:
        return
    changed, deleted, listing = goal
    base = (
        f"{traj.task.strip()}\n\nWhen you are done, the workspace must hold exactly what a correct solution "
        f"leaves there; these paths are checked:\n{listing}"
    )
    workspace, solution = dict(rep.states[0]), oracle_files(traj.actions)
    untouched = tuple(sorted(p for p in workspace if p not in changed and p not in deleted))
    yield _spec(
        traj,
        "state",
        0,
        instruction=base,
        workspace=workspace,
        tests=_state_check(changed, deleted, None),
        solution=solution,
        difficulty="medium",
        protected_paths=untouched,
    )
    used = len(traj.actions)
    effective = sum(rep.changes(i, i + 1) for i in range(used))
    budget = effective + 1  # one spare call: text-mode harnesses spend one on submitting
    if budget >= used:
        return
    instruction = (
        f"{base}\n\nYou may make at most {budget} tool calls (shell commands) in total; a solution that "
        f"uses more scores 0."
    )
    yield _spec(
        traj,
        "budget",
        0,
        instruction=instruction,
        workspace=workspace,
        tests=_state_check(changed, deleted, budget),
        solution=solution,
        difficulty="hard",
        protected_paths=untouched,
        metadata={"budget": budget, "trajectory_tool_calls": used},
    )


# --- (3) make a failed command succeed ----------------------------------------------------------------------------


def fix_tasks(rep: Replayed) -> Iterator[TaskSpec]:
    """A failing command that the trajectory later ran again with success; the calls in between are the fix."""
    traj, made, seen = rep.trajectory, 0, set()
    for i, (action, result) in enumerate(zip(traj.actions, rep.results, strict=False)):
        if action.command is None or not rep.trusted[i] or not result.exit_code or action.command in seen:
            continue
        later = next(
            (
                j
                for j in range(i + 1, len(rep.results))
                if traj.actions[j].command == action.command and rep.results[j].exit_code == 0 and rep.trusted[j]
            ),
            None,
        )
        if later is None:
            continue
        seen.add(action.command)
        shown = "\n".join(normalise(result.output).splitlines()[-ERROR_LINES_SHOWN:]) or "(no output)"
        instruction = (
            f"Running this command in the current folder fails (exit status {result.exit_code}):\n\n"
            f"```bash\n{action.command}\n```\n\nIt printed:\n\n```\n{shown}\n```\n\n"
            "Change the workspace so that the command succeeds (exit status 0) and does its job. "
            "Do not change the command itself."
        )
        check = {"kind": "command", "expected_output": rep.results[later].output}
        yield _spec(
            traj,
            "fix",
            made,
            instruction=instruction,
            workspace=dict(rep.states[i]),
            tests=tests_files(check, {"command.sh": action.command + "\n"}),
            solution=oracle_files(traj.actions[i + 1 : later + 1]),
            difficulty="medium",
            metadata={"step": i, "fixed_at": later, "command": action.command},
        )
        made += 1


def generate(trajectory: Trajectory, sandbox: Sandbox | None = None) -> list[TaskSpec]:
    """All candidate tasks of one trajectory (before the keep check), in a fixed order."""
    rep = replay(trajectory, sandbox)
    if rep is None:
        return []
    return [*qa_tasks(rep), *state_tasks(rep), *fix_tasks(rep)]
