"""Records the bundled trajectory corpus: real tool outputs, produced by running the commands.

``python -m scripts.record_trajectories [OUT]`` (from the checkout) replays every scripted session of
``scripts/trajectory_sessions.py`` in a fresh temporary workspace, records each command's real output and exit
status, and writes the session in its format: an OpenAI chat file with tool calls ("chat"), a
mini-swe-agent-style chat file with ```bash blocks ("text") or an ATIF file ("atif"). With ``--rollout`` it
also records a rollout of this project: the real mini-swe-agent binary (text mode) against the capture proxy
and the scripted fake engine, whose ``trace.jsonl`` is kept (its session key replaced) with a
``synthetic.json`` naming the instruction and starting workspace.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_rl.envs.sources.synthetic_replay import StepResult, run_action, write_files
from harness_rl.envs.sources.synthetic_trajectory import make_action
from harness_rl.proxy.export import read_trace_jsonl, write_trace_jsonl
from harness_rl.testkit.fake_vllm import Reply
from scripts.trajectory_sessions import SESSIONS, Session

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "harness_rl" / "envs" / "data" / "trajectories"
ATIF_VERSION = "ATIF-v1.6"
SUBMIT = "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"


def run_session(session: Session) -> list[StepResult]:
    """Runs the session's steps in a fresh workspace; what each printed and returned."""
    with tempfile.TemporaryDirectory(prefix="hrl-corpus-") as tmp:
        root = Path(tmp)
        write_files(root, session.workspace)
        results = []
        for step in session.steps:
            name, args = _tool(step)
            results.append(run_action(make_action(name, args, None, step.thought), root))
        return results


def _tool(step) -> tuple[str, dict[str, Any]]:
    if step.write:
        return "write_file", {"path": step.write[0], "content": step.write[1]}
    return "bash", {"command": step.command}


def _tool_output(step, result: StepResult) -> str:
    if step.write:
        return f"Wrote {len(step.write[1].encode())} bytes to {step.write[0]}."
    return json.dumps({"exit_code": result.exit_code, "output": result.output})


def to_chat(session: Session, results: list[StepResult]) -> dict[str, Any]:
    """OpenAI chat messages with structured tool calls; tool results as JSON ``{exit_code, output}``."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the bash and write_file tools."},
        {"role": "user", "content": session.task},
    ]
    for n, (step, result) in enumerate(zip(session.steps, results, strict=True)):
        name, args = _tool(step)
        call = {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        messages.append({"role": "assistant", "content": step.thought, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": _tool_output(step, result)})
    messages.append({"role": "assistant", "content": "Done."})
    return {"messages": messages, "workspace": session.workspace}


def to_text(session: Session, results: list[StepResult]) -> dict[str, Any]:
    """mini-swe-agent's text style: a ```bash block per turn, observations with ``<returncode>`` tags."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant that solves tasks by running shell commands."},
        {"role": "user", "content": f"Solve the task with one shell command per reply.\n\nTask: {session.task}"},
    ]
    for step, result in zip(session.steps, results, strict=True):
        if step.write:
            raise ValueError(f"session {session.id}: text style has no file-write tool")
        messages.append({"role": "assistant", "content": f"{step.thought}\n\n```bash\n{step.command}\n```"})
        observation = f"<returncode>{result.exit_code}</returncode>\n<output>\n{result.output}</output>"
        messages.append({"role": "user", "content": observation})
    messages.append({"role": "assistant", "content": SUBMIT})
    return {"messages": messages, "workspace": session.workspace}


def to_atif(session: Session, results: list[StepResult]) -> dict[str, Any]:
    """An ATIF document; the exit status goes in each observation result's ``extra``."""
    steps: list[dict[str, Any]] = [{"step_id": 1, "source": "user", "message": session.task}]
    for n, (step, result) in enumerate(zip(session.steps, results, strict=True)):
        name, args = _tool(step)
        call_id = f"call_{n}"
        content = _tool_output(step, result) if step.write else result.output
        observed: dict[str, Any] = {"source_call_id": call_id, "content": content}
        if result.exit_code is not None:
            observed["extra"] = {"exit_code": result.exit_code}
        steps.append(
            {
                "step_id": len(steps) + 1,
                "source": "agent",
                "message": step.thought,
                "tool_calls": [{"tool_call_id": call_id, "function_name": name, "arguments": args}],
                "observation": {"results": [observed]},
            }
        )
    steps.append({"step_id": len(steps) + 1, "source": "agent", "message": "Done."})
    return {
        "schema_version": ATIF_VERSION,
        "session_id": session.id,
        "agent": {"name": "harness-rl-scripted", "version": "1", "model_name": "scripted"},
        "steps": steps,
        "extra": {"harness_rl": {"workspace": session.workspace}},
    }


WRITERS = {"chat": to_chat, "text": to_text, "atif": to_atif}


def record_sessions(out: Path) -> list[Path]:
    """Records every scripted session into ``out``; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for session in SESSIONS:
        doc = WRITERS[session.style](session, run_session(session))
        path = out / f"{session.id}.{session.style}.json"
        path.write_text(json.dumps(doc, indent=1) + "\n")
        written.append(path)
    return written


# --- rollouts of this project ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScriptedRollout:
    """A rollout to record: mini-swe-agent in ``mode`` on a task, with the fake engine's replies scripted."""

    name: str
    mode: str
    instruction: str
    workspace: dict[str, str]
    replies: list[Reply]
    verifier: dict[str, str]


def _bash(command: str, text: str = "") -> Reply:
    return Reply(text=text, tool_calls=[("bash", {"command": command})])


ROLLOUTS = [
    ScriptedRollout(
        "rollout-mini-even",
        "text",
        "Count the even numbers in numbers.txt and write the count to even.txt.",
        {"numbers.txt": "3\n8\n15\n22\n41\n60\n7\n"},
        [
            Reply(text="How many lines does numbers.txt have?\n```bash\nwc -l < numbers.txt\n```"),
            Reply(text="Count the even ones.\n```bash\nawk '$1 % 2 == 0' numbers.txt | wc -l > even.txt\n```"),
            Reply(text="Check.\n```bash\ncat even.txt\n```"),
            Reply(text=SUBMIT),
        ],
        {"kind": "file_contains", "path": "even.txt", "word": "3"},
    ),
    ScriptedRollout(
        "rollout-mini-tools-max",
        "tool",
        "Write the largest price in prices.txt to out/max.txt.",
        {"prices.txt": "12.50\n7.25\n19.99\n3.10\n"},
        [
            _bash("sort -n prices.txt | tail -1", "What is the largest price in prices.txt?"),
            _bash("sort -n prices.txt | tail -1 > out/max.txt", "Write it."),
            _bash("mkdir out", "The out folder is missing."),
            _bash("sort -n prices.txt | tail -1 > out/max.txt", "Write it again."),
            _bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
        ],
        {"kind": "file_contains", "path": "out/max.txt", "word": "19.99"},
    ),
]


def record_rollout(out: Path, rollout: ScriptedRollout) -> Path:
    """Runs mini-swe-agent on ``rollout``'s task through the capture proxy and the scripted fake engine
    (``harness_rl.testkit.scripted_proxy``), and keeps the rollout's ``trace.jsonl`` plus ``synthetic.json``."""
    from harness_rl.envs.task import Task
    from harness_rl.harnesses import MiniSweAgent
    from harness_rl.rollout.proxy_admin import ProxyAdmin
    from harness_rl.rollout.session import RolloutSettings, run_rollout
    from harness_rl.testkit.scripted_proxy import ScriptedProxy

    task = Task(id=rollout.name, instruction=rollout.instruction, files=rollout.workspace, verifier=rollout.verifier)
    settings = RolloutSettings(
        step_limit=8, max_requests=10, timeout_s=120, verifier_timeout_s=30, temperature=0.0, max_tokens=256
    )
    with tempfile.TemporaryDirectory(prefix="hrl-rollout-") as tmp, ScriptedProxy() as proxy:
        proxy.script(list(rollout.replies))
        admin = ProxyAdmin(proxy.url, proxy.admin_token)
        try:
            result = run_rollout(
                task=task,
                harness=MiniSweAgent(mode=rollout.mode),
                proxy=admin,
                adapter=None,
                settings=settings,
                rollout_dir=Path(tmp) / "r0",
            )
        finally:
            admin.close()
        if result.unscorable or result.score != 1.0:
            raise RuntimeError(f"the recorded rollout did not solve its task: {result.summary()}")
        folder = out / rollout.name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        trace = read_trace_jsonl(Path(tmp) / "r0" / "trace.jsonl")
        trace["key"] = "hrl-recorded"  # the session's API key was only valid on that proxy; keep it out of the repo
        write_trace_jsonl(folder / "trace.jsonl", trace)
    meta = {
        "instruction": rollout.instruction,
        "workspace": rollout.workspace,
        "harness": f"mini_swe_agent ({rollout.mode})",
    }
    (folder / "synthetic.json").write_text(json.dumps(meta, indent=1) + "\n")
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rollout", action="store_true", help="also record a mini-swe-agent rollout trace")
    args = parser.parse_args(argv)
    for path in record_sessions(args.out):
        print(path)
    if args.rollout:
        for rollout in ROLLOUTS:
            print(record_rollout(args.out, rollout))


if __name__ == "__main__":
    main()
