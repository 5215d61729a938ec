"""Run a task folder's scripts in the sandbox: the verifier (tests/test.sh) and the oracle (solution/solve.sh).

The verifier runs after the harness exited. Its tests are copied out of the task folder (which every sandbox
hides) into ``<rollout>/verifier/tests-<random>``, a folder whose name is drawn only when the verifier starts
(so no path the agent could have aimed a link at during its run), and bound read-only into a sandbox whose
working directory is the rollout's workspace; the copy is deleted once the verifier ended, so no later process
can find it either. Before it runs, links out of the workspace are deleted (``harness_rl.envs.links``).
The contract (environment variables, reward file) is in ``harness_rl.envs.spec``.

A verifier that exits non-zero, times out or writes no valid reward makes the rollout unscorable (score
None with the reason), never 0.
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness_rl.envs.links import remove_escaping_links
from harness_rl.envs.task import Task, lay_out_workspace
from harness_rl.envs.verdict import VerifierResult, check_score
from harness_rl.sandbox.base import Sandbox, SandboxClosedError, SandboxLayout, hidden_from_sandboxes

#: Address-space cap of a verifier or oracle run when the caller gives no sandbox: pandas and pytest with
#: numpy's thread pools reserve far more virtual memory than a harness's 2 GiB default.
SCRIPT_ADDRESS_SPACE_BYTES = 8 << 30

DEFAULT_VERIFIER_TIMEOUT_S = 120.0
DEFAULT_ORACLE_TIMEOUT_S = 600.0

#: Output kept from a script's stdout+stderr in error messages.
TAIL_CHARS = 1500


@dataclass(frozen=True)
class OracleResult:
    """How the oracle did on a fresh workspace.

    Attributes:
        verdict: The verifier's result on the solved workspace (None when solve.sh itself failed).
        error: Why solve.sh failed (None when it exited 0).
        workspace: The workspace the oracle left.
    """

    verdict: VerifierResult | None
    error: str | None
    workspace: Path

    @property
    def passed(self) -> bool:
        """solve.sh ran and the verifier gave 1.0."""
        return self.verdict is not None and self.verdict.score == 1.0


def default_sandbox() -> Sandbox:
    """A local sandbox for scripts (bwrap when usable)."""
    from harness_rl.sandbox.local import LocalSandbox

    return LocalSandbox(address_space_bytes=SCRIPT_ADDRESS_SPACE_BYTES)


def script_env(**hrl: Path | str) -> dict[str, str]:
    """The minimal environment of a task script plus ``HRL_PYTHON`` and the given ``HRL_*`` variables."""
    from harness_rl.sandbox.local import base_env

    env = base_env({"HRL_PYTHON": sys.executable})
    env.update({f"HRL_{name.upper()}": str(value) for name, value in hrl.items()})
    return env


def run_tests(
    task: Task,
    workspace: Path,
    *,
    rollout_dir: Path | None = None,
    sandbox: Sandbox | None = None,
    timeout_s: float | None = None,
    tool_calls: int | None = None,
) -> VerifierResult:
    """Run ``task``'s tests/test.sh on ``workspace`` in the sandbox and read the reward back.

    Args:
        task: A task read from a folder (``task.task_dir``).
        workspace: The workspace in its final state (the script's working directory, writable).
        rollout_dir: Where ``verifier/`` goes (tests copy, logs, output); a temporary folder when None.
        sandbox: Where the script runs (default ``default_sandbox()``).
        timeout_s: Wall-clock limit (default: the task's, else ``DEFAULT_VERIFIER_TIMEOUT_S``).
        tool_calls: The rollout's tool calls, given to the script as ``HRL_TOOL_CALLS`` (unset when None).

    Returns:
        The reward, or None with the reason.
    """
    if task.task_dir is None:
        return VerifierResult(None, f"task {task.id} has no task folder, so no tests/test.sh")
    if rollout_dir is None:
        with tempfile.TemporaryDirectory(prefix="hrl-verify-") as tmp:
            return run_tests(task, workspace, rollout_dir=Path(tmp), sandbox=sandbox, timeout_s=timeout_s,
                             tool_calls=tool_calls)  # fmt: skip
    limit = timeout_s or task.verifier_timeout_s or DEFAULT_VERIFIER_TIMEOUT_S
    vdir = Path(rollout_dir).resolve() / "verifier"
    shutil.rmtree(vdir, ignore_errors=True)  # a fresh verifier folder: nothing left by an earlier attempt
    remove_escaping_links(workspace)
    # A name drawn now: a workspace link aimed at a fixed tests path (``verifier/tests/expected.txt``) during
    # the agent's run would otherwise resolve once the copy exists.
    tests, logs = vdir / f"tests-{secrets.token_hex(8)}", vdir / "logs"
    try:
        shutil.copytree(Path(task.task_dir) / "tests", tests, symlinks=True)
        logs.mkdir(parents=True)
        layout = SandboxLayout(
            workspace=Path(workspace).resolve(),
            home=vdir / "home",
            tmp=vdir / "tmp",
            writable=(logs,),
            hidden=(Path(rollout_dir).resolve(), *hidden_from_sandboxes()),
            readonly=(tests,),
        )
        counts = {} if tool_calls is None else {"tool_calls": str(tool_calls)}
        env = script_env(workspace=layout.workspace, tests_dir=tests, logs_dir=logs, **counts)
        ran = _run_script(sandbox, ["bash", str(tests / "test.sh")], layout, env, limit, vdir / "output.log")
        if ran.error is not None:
            return ran
        reward = read_reward(logs)
        return VerifierResult(reward.score, reward.error, ran.seconds)
    finally:
        shutil.rmtree(tests, ignore_errors=True)


def _run_script(
    sandbox: Sandbox | None, argv: list[str], layout: SandboxLayout, env: dict[str, str], limit: float, log: Path
) -> VerifierResult:
    """Run one script; the result has ``error`` set when it did not exit 0 in time (its score means nothing)."""
    sandbox = sandbox or default_sandbox()
    name = Path(argv[-1]).name
    try:
        with open(log, "wb") as out:
            result = sandbox.run(argv, layout, env=env, timeout_s=limit, stdout=out, stderr=out)
    except SandboxClosedError as err:
        return VerifierResult(None, f"{name} not run: {err}")
    except OSError as err:
        return VerifierResult(None, f"{name} could not start: {err}")
    if result.timed_out:
        return VerifierResult(None, f"{name} timed out after {limit:g} s", result.seconds)
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-TAIL_CHARS:]
        return VerifierResult(None, f"{name} exited {result.returncode}: {tail}", result.seconds)
    return VerifierResult(None, None, result.seconds)


def read_reward(logs: Path) -> VerifierResult:
    """The reward in ``logs/reward.json`` (``{"reward": x}``) or, as Harbor also writes it, ``logs/reward.txt``."""
    json_path, txt_path = logs / "reward.json", logs / "reward.txt"
    try:
        if json_path.is_file():
            text = json_path.read_text(errors="replace")[:10_000]
            doc = json.loads(text)
            if not isinstance(doc, dict) or "reward" not in doc:
                return VerifierResult(None, f"reward.json has no 'reward': {text[:200]!r}")
            return VerifierResult(check_score(doc["reward"], text), None)
        if txt_path.is_file():
            text = txt_path.read_text(errors="replace")[:1000].strip()
            return VerifierResult(check_score(float(text), text), None)
    except (ValueError, json.JSONDecodeError) as err:
        return VerifierResult(None, f"bad reward file: {err}")
    return VerifierResult(None, "the verifier wrote no reward.json or reward.txt")


def run_oracle(
    task: Task, work_dir: Path, *, sandbox: Sandbox | None = None, timeout_s: float | None = None
) -> OracleResult:
    """Lay out a fresh workspace in ``work_dir``, run solution/solve.sh on it in the sandbox, then verify.

    Args:
        task: A task read from a folder.
        work_dir: An empty or missing folder for this attempt (``workspace/``, ``oracle/``, ``verifier/``).
        sandbox: Where both scripts run (default ``default_sandbox()``).
        timeout_s: Limit of solve.sh (default: the task's agent limit, else ``DEFAULT_ORACLE_TIMEOUT_S``).
    """
    work_dir = Path(work_dir).resolve()
    workspace = lay_out_workspace(task, work_dir / "workspace")
    if task.task_dir is None or not (Path(task.task_dir) / "solution" / "solve.sh").is_file():
        return OracleResult(None, f"task {task.id} has no solution/solve.sh", workspace)
    odir = work_dir / "oracle"
    solution = odir / "solution"
    shutil.copytree(Path(task.task_dir) / "solution", solution, symlinks=True)
    layout = SandboxLayout(
        workspace=workspace,
        home=odir / "home",
        tmp=odir / "tmp",
        hidden=(work_dir, *hidden_from_sandboxes()),
        readonly=(solution,),
    )
    env = script_env(workspace=workspace, solution_dir=solution)
    limit = timeout_s or task.agent_timeout_s or DEFAULT_ORACLE_TIMEOUT_S
    try:
        failed = _run_script(sandbox, ["bash", str(solution / "solve.sh")], layout, env, limit, odir / "output.log")
    finally:
        shutil.rmtree(solution, ignore_errors=True)
    if failed.error is not None:
        return OracleResult(None, failed.error, workspace)
    # The oracle made no model tool call (verifiers with a tool-call budget read HRL_TOOL_CALLS).
    verdict = run_tests(task, workspace, rollout_dir=work_dir, sandbox=sandbox, tool_calls=0)
    return OracleResult(verdict, None, workspace)


def run_empty_attempt(task: Task, work_dir: Path, *, sandbox: Sandbox | None = None) -> VerifierResult:
    """The verifier's result on the untouched starting workspace (a valid task gives less than 1.0)."""
    workspace = lay_out_workspace(task, Path(work_dir) / "workspace")
    return run_tests(task, workspace, rollout_dir=work_dir, sandbox=sandbox, tool_calls=0)
