"""``python -m harness_rl.harnesses check NAME...``: does each installed harness work end to end through the proxy?

Each named harness runs once, in its default sandbox, on a tiny task against the real capture proxy in front of
a scripted engine (``harness_rl.testkit.scripted_proxy``; the one production module allowed to import the
testkit, see harness_rl/testkit/__init__.py). The script makes the harness call its own shell tool once
(writing a file into the task workspace) and then finish. The check reports what the proxy saw (dialect,
streaming, requests) and whether the file exists with the scripted content, so a broken pin, config template or
sandbox mount shows up before a training run depends on it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness_rl.harnesses import HARNESSES
from harness_rl.harnesses.base import Harness
from harness_rl.harnesses.install import install_command
from harness_rl.testkit.fake_vllm import Reply
from harness_rl.testkit.scripted_proxy import ScriptedProxy, bash_block_then_submit, shell_then_done

#: The file the scripted shell command creates, relative to the task workspace.
CHECK_FILE = "out.txt"
INSTRUCTION = f"Create a file named {CHECK_FILE} in the current directory containing one line: the check token."


@dataclass
class CheckResult:
    """One harness's check, printed as one JSON line.

    Attributes:
        harness: The harness name.
        ok: True when it ran the command, finished "submitted" and spoke its declared dialect.
        version: The installed version (None when not installed).
        dialect: Wire dialect(s) the proxy recorded, comma-separated ("" when no call was captured).
        streamed: True when every engine call was streamed, False when none was, "mixed" otherwise.
        command_executed: The scripted command's file exists in the workspace with the scripted content.
        exit_kind: The adapter's normalized outcome (None when the run did not start).
        requests: Requests the proxy received in the session.
        tool_calls: Commands the harness reports it executed.
        seconds: Wall-clock seconds of the harness run.
        error: Why it is not ok (None when ok).
    """

    harness: str
    ok: bool
    version: str | None = None
    dialect: str = ""
    streamed: bool | str = False
    command_executed: bool = False
    exit_kind: str | None = None
    requests: int = 0
    tool_calls: int = 0
    seconds: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scripted_replies(harness: Harness, command: str) -> list[Reply]:
    """The engine script that makes ``harness`` run ``command`` once and then finish.

    Most harnesses finish on a plain-text answer after a call of their shell tool. mini-swe-agent finishes only
    on its submit command, and in text mode its actions are ```bash blocks rather than tool calls.
    """
    if harness.name == "mini_swe_agent":
        if getattr(harness, "mode", "text") == "text":
            return bash_block_then_submit(command)
        tool, argument = harness.shell_tool
        submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
        return [Reply(tool_calls=[(tool, {argument: command})]), Reply(tool_calls=[(tool, {argument: submit})])]
    return shell_then_done(*harness.shell_tool, command=command)


def _streamed(requests: list[dict[str, Any]]) -> bool | str:
    flags = {bool(r.get("stream")) for r in requests}
    return flags.pop() if len(flags) == 1 else ("mixed" if flags else False)


def check_harness(harness: Harness, proxy: ScriptedProxy, work_dir: Path, *, timeout_s: float = 120.0) -> CheckResult:
    """Run one check of ``harness`` through ``proxy``; never raises for a failing harness.

    Args:
        harness: The adapter instance (its sandbox and tools folder are the ones checked).
        proxy: A started ScriptedProxy (its script is replaced).
        work_dir: An empty folder for the rollout (workspace, home, logs).
        timeout_s: Wall-clock limit of the harness run.
    """
    result = CheckResult(harness=harness.name, ok=False)
    if not harness.is_installed():
        result.error = f"{harness.name} is not installed; install it with: {install_command(harness.name)}"
        return result
    result.version = harness.version()
    token = f"harness-rl-check-{harness.name}"
    key = proxy.session(scripted_replies(harness, f"echo {token} > {CHECK_FILE}"), max_requests=10)
    workspace = work_dir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        outcome = harness.run(
            workspace,
            f"{INSTRUCTION} The check token is {token}.",
            base_url=proxy.base_url,
            api_key=key,
            step_limit=5,
            timeout_s=timeout_s,
            rollout_dir=work_dir,
        )
    except Exception as err:  # reported, so one broken harness does not hide the others' results
        result.seconds = round(time.monotonic() - start, 2)
        result.error = f"{type(err).__name__}: {err}"
        return result
    trace = proxy.trace(key)
    created = workspace / CHECK_FILE
    result.dialect = ",".join(sorted({n["dialect"] for n in trace.get("nodes", [])}))
    result.streamed = _streamed(proxy.engine.requests)
    result.command_executed = created.is_file() and created.read_text(errors="replace").strip() == token
    result.exit_kind = outcome.exit_kind
    result.requests = int(trace.get("requests") or 0)
    result.tool_calls = outcome.n_tool_calls
    result.seconds = round(outcome.seconds, 2)
    problems = []
    if not result.command_executed:
        problems.append(f"{CHECK_FILE} was not created with the scripted content")
    if outcome.exit_kind != "submitted":
        problems.append(f"exit_kind {outcome.exit_kind!r}: {outcome.error or outcome.final_message}"[:500])
    if result.dialect != harness.dialect:
        problems.append(f"dialect seen {result.dialect!r}, adapter declares {harness.dialect!r}")
    if trace.get("failures"):
        problems.append(f"proxy recorded failed calls: {trace['failures'][:2]}")
    result.ok = not problems
    result.error = "; ".join(problems) or None
    return result


def expand_names(names: Iterable[str]) -> list[str]:
    """Harness names in the order given, with "all" standing for every registered harness.

    Raises:
        KeyError: A name is not a registered harness.
    """
    out: list[str] = []
    for name in names:
        for n in sorted(HARNESSES) if name == "all" else [name]:
            if n not in HARNESSES:
                raise KeyError(n)
            if n not in out:
                out.append(n)
    return out


def run_checks(names: Iterable[str], *, timeout_s: float = 120.0, tools: Path | None = None) -> Iterator[CheckResult]:
    """Check each named harness in turn through one scripted proxy; yields results as they finish.

    Args:
        names: Harness names ("all" expands to every registered one).
        timeout_s: Wall-clock limit of each harness run.
        tools: The tools folder the adapters look in (default: theirs).
    """
    selected = expand_names(names)
    with ScriptedProxy() as proxy, tempfile.TemporaryDirectory(prefix="harness-rl-check-") as tmp:
        for name in selected:
            harness = HARNESSES[name](**({"tools": tools} if tools is not None else {}))
            yield check_harness(harness, proxy, Path(tmp) / name, timeout_s=timeout_s)
