"""Replaying a trajectory's tool calls on a workspace, and running a generated task's scripts per the contract.

Replay is how the generators learn what each step did (the workspace before and after it, its real output) and
how they check that a trajectory's recorded outputs are reproducible: a step whose replayed output differs
from the recorded one is not trusted for a question or a failure. Commands run with bash in a temporary
folder, one fresh shell per call like the harnesses do, with a timeout, and inside a ``Sandbox`` when one is
given (the builder passes this project's bubblewrap sandbox: the host is read-only to them, only the replay
folder is writable), since a trajectory's commands may be a model's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harness_rl.envs.sources.synthetic_trajectory import Action
from harness_rl.envs.spec import TaskSpec
from harness_rl.sandbox.base import Sandbox, SandboxLayout

STEP_TIMEOUT_S = 20.0
#: What the workspace's absolute path reads as in recorded outputs: Harbor's workspace, so that an output naming
#: a file by its full path (a Python traceback) is the same in every replay and in the recording.
WORKSPACE_ALIAS = "/app"
#: Files a run leaves behind that are never part of a goal.
IGNORED_PARTS = ("__pycache__", ".pytest_cache", ".git")


@dataclass(frozen=True)
class StepResult:
    """What replaying one action did: its output and exit status (None for a file write)."""

    output: str
    exit_code: int | None


def clean_env(workspace: Path) -> dict[str, str]:
    """A small, fixed environment, so replays give the same output on any machine."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workspace),
        "LC_ALL": "C",
        "LANG": "C",
        "TZ": "UTC",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    """Writes ``files`` (relative path -> content) under ``root``."""
    for rel, content in files.items():
        p = PurePosixPath(rel)
        if p.is_absolute() or ".." in p.parts:
            raise ValueError(f"path {rel!r} leaves its folder")
        target = root.joinpath(*p.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)


def snapshot(root: Path) -> dict[str, str | bytes]:
    """The files under ``root``: relative path -> text (bytes when not UTF-8); run leftovers ignored."""
    out: dict[str, str | bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or path.is_symlink() or any(part in IGNORED_PARTS for part in rel.parts):
            continue
        data = path.read_bytes()
        try:
            out[rel.as_posix()] = data.decode("utf-8")
        except UnicodeDecodeError:
            out[rel.as_posix()] = data
    return out


def run_command(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    *,
    sandbox: Sandbox | None = None,
    writable: tuple[Path, ...] = (),
    readonly: tuple[Path, ...] = (),
) -> tuple[int | None, str]:
    """Runs ``argv`` in ``cwd`` (in ``sandbox`` when given); its exit status (None on timeout) and its stdout and
    stderr together. In a sandbox the host's /tmp is private, so folders under it that the command reads must be
    in ``readonly`` and those it writes (besides ``cwd``) in ``writable``."""
    with tempfile.TemporaryDirectory(prefix="hrl-run-") as tmp:
        out_path = Path(tmp) / "output"
        with open(out_path, "wb") as out:
            if sandbox is None:
                try:
                    proc = subprocess.run(
                        argv,
                        cwd=cwd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        timeout=timeout_s,
                        check=False,
                    )
                    code: int | None = proc.returncode
                except subprocess.TimeoutExpired:
                    code = None
            else:
                layout = SandboxLayout(
                    workspace=Path(cwd).resolve(),
                    home=Path(tmp) / "home",
                    tmp=Path(tmp) / "tmp",
                    writable=writable,
                    readonly=readonly,
                )
                result = sandbox.run(argv, layout, env=env, timeout_s=timeout_s, stdout=out, stderr=out)
                code = None if result.timed_out else result.returncode
        return code, out_path.read_bytes().decode(errors="replace")


def run_action(action: Action, workspace: Path, sandbox: Sandbox | None = None) -> StepResult:
    """Replays one action in ``workspace``: a shell command with bash (stdout and stderr together, like the
    harnesses show them; the workspace's path printed as ``WORKSPACE_ALIAS``), or a file write."""
    if action.write is not None:
        write_files(workspace, {action.write[0]: action.write[1]})
        return StepResult("", None)
    if action.command is None:
        raise ValueError(f"action {action.tool} is not replayable")
    code, output = run_command(
        ["bash", "-c", action.command], workspace, clean_env(workspace), STEP_TIMEOUT_S, sandbox=sandbox
    )
    for alias in sorted({str(workspace.resolve()), str(workspace)}, key=len, reverse=True):
        output = output.replace(alias, WORKSPACE_ALIAS)
    return StepResult(output, 124 if code is None else code)


def same_output(recorded: str | None, replayed: str) -> bool:
    """Whether a recorded output matches its replay, up to trailing whitespace per line and at the end."""
    if recorded is None:
        return True
    return normalise(recorded) == normalise(replayed)


def normalise(text: str) -> str:
    """Text with trailing whitespace stripped from every line and blank lines at the ends dropped."""
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).strip("\n")


# --- running a generated task per the TaskSpec contract (the keep check) -----------------------------------------


def _write_task(spec: TaskSpec, root: Path) -> tuple[Path, Path, Path]:
    tests, solution, workspace = root / "tests", root / "solution", root / "workspace"
    for folder, files in ((tests, spec.tests), (solution, spec.solution), (workspace, spec.workspace)):
        folder.mkdir(parents=True)
        write_files(folder, files)
    return tests, solution, workspace


def run_verifier(
    tests: Path,
    workspace: Path,
    logs: Path,
    *,
    tool_calls: int | None,
    timeout_s: float,
    sandbox: Sandbox | None = None,
) -> float | None:
    """Runs ``tests/test.sh`` on ``workspace``; the reward, or None when unscorable (non-zero exit, timeout,
    no reward file). ``tool_calls`` goes to the verifier as ``HRL_TOOL_CALLS`` (None: not set)."""
    logs.mkdir(parents=True, exist_ok=True)
    env = clean_env(workspace) | {
        "HRL_WORKSPACE": str(workspace),
        "HRL_TESTS_DIR": str(tests),
        "HRL_LOGS_DIR": str(logs),
        "HRL_PYTHON": sys.executable,
    }
    if tool_calls is not None:
        env["HRL_TOOL_CALLS"] = str(tool_calls)
    code, _ = run_command(
        ["bash", str(tests / "test.sh")],
        workspace,
        env,
        timeout_s,
        sandbox=sandbox,
        writable=(logs,),
        readonly=(tests,),
    )
    reward_file = logs / "reward.json"
    if code != 0 or not reward_file.exists():
        return None
    return float(json.loads(reward_file.read_text())["reward"])


def oracle_and_empty(spec: TaskSpec, sandbox: Sandbox | None = None) -> tuple[float | None, float | None]:
    """The verifier's reward after the oracle and on the untouched workspace (each on its own fresh copy),
    both with ``HRL_TOOL_CALLS=0``: neither made a model tool call."""
    with tempfile.TemporaryDirectory(prefix="hrl-synthetic-") as tmp:
        root = Path(tmp)
        tests, solution, workspace = _write_task(spec, root / "task")
        oracle_ws, empty_ws = root / "oracle", root / "empty"
        shutil.copytree(workspace, oracle_ws)
        shutil.copytree(workspace, empty_ws)
        env = clean_env(oracle_ws) | {"HRL_SOLUTION_DIR": str(solution)}
        code, _ = run_command(
            ["bash", str(solution / "solve.sh")],
            oracle_ws,
            env,
            spec.agent_timeout_s,
            sandbox=sandbox,
            readonly=(solution,),
        )
        if code is None:
            return None, None
        limit = spec.verifier_timeout_s
        oracle = run_verifier(tests, oracle_ws, root / "logs-oracle", tool_calls=0, timeout_s=limit, sandbox=sandbox)
        empty = run_verifier(tests, empty_ws, root / "logs-empty", tool_calls=0, timeout_s=limit, sandbox=sandbox)
        return oracle, empty


def keep(spec: TaskSpec, sandbox: Sandbox | None = None) -> bool:
    """The keep rule: the oracle scores 1.0 and the untouched workspace scores less (and is scorable)."""
    oracle, empty = oracle_and_empty(spec, sandbox)
    return oracle == 1.0 and empty is not None and empty < 1.0
