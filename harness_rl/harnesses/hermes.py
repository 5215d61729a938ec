"""hermes-agent 0.19.0 (Nous Research), run headless once per rollout (streaming OpenAI chat).

Per rollout, ``$HERMES_HOME`` (``rollout_dir/harness/hermes``) gets ``config.yaml`` rendered from
``configs/hermes_config.yaml`` (proxy base URL, model id, context length, max output tokens, retries, the
switches for lazy pip installs, the tirith download and compaction) and a fresh ``.update_check`` cache:
without it ``hermes chat`` asks pypi.org for updates. With both, strace showed no outbound connection.

The command is ``hermes chat -q ... -Q --yolo --max-turns N`` rather than the one-shot ``hermes -z``: ``-z``
ignores the turn limit and exits 0 even when every API call failed. ``--max-turns`` is hard but counts tool
iterations, after which hermes makes one tool-less summary call, so N = step_limit - 1 keeps the model
calls at step_limit (one more if the summary reply carries no text and hermes asks again).

The outcome comes from hermes's own records in ``$HERMES_HOME``: the session row and messages in
``state.db`` (API calls, tool calls, final answer) and the "Turn ended: reason=..." line of
``logs/agent.log`` (``text_response`` or ``max_iterations_reached``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template

from harness_rl.harnesses.base import ExitKind, HarnessOutcome
from harness_rl.harnesses.common import CONFIG_DIR, tail
from harness_rl.harnesses.install import PYTHON_TOOLS, venv_dir
from harness_rl.harnesses.installed import VenvInstalled
from harness_rl.sandbox.base import Sandbox, SandboxLayout
from harness_rl.sandbox.local import LocalSandbox, base_env

logger = logging.getLogger(__name__)

CONFIG_TEMPLATE = CONFIG_DIR / "hermes_config.yaml"

#: hermes rejects a smaller context window at start-up.
MIN_CONTEXT_LENGTH = 64_000

_TURN_ENDED = re.compile(r"Turn ended: reason=(\S+)")


class Hermes(VenvInstalled):
    """The hermes-agent harness.

    Args:
        sandbox: Where the process runs (default: a LocalSandbox).
        tools: The tools folder (default: ``install.tools_dir()``).
        model_name: The model id hermes sends (the proxy ignores it and serves the session's adapter).
        context_length: The context window hermes plans for; raised to 64,000 if smaller (hermes's minimum).
        max_output_tokens: ``max_tokens`` of each request (hermes's default is 65536).
        max_retries: ``agent.api_max_retries`` (attempts per model call, 1 = no retry).
        extra_args: Further ``hermes chat`` arguments, appended last.
    """

    name = "hermes"
    dialect = "openai_chat"
    #: The harness's own shell tool and its command argument (what a scripted check calls).
    shell_tool = ("terminal", "command")
    text_action_regex = None  # acts through tool calls only
    #: ``--max-turns`` stops hermes itself (see the module docstring for the one summary call).
    step_limit_is_hard = True

    def __init__(
        self,
        *,
        sandbox: Sandbox | None = None,
        tools: Path | None = None,
        model_name: str = "harness-rl",
        context_length: int = 32768,
        max_output_tokens: int = 4096,
        max_retries: int = 2,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.sandbox = sandbox or LocalSandbox()
        self.tools = tools
        self.model_name = model_name
        self.context_length = context_length
        self.max_output_tokens = max_output_tokens
        self.max_retries = max_retries
        self.extra_args = tuple(extra_args)
        self._spec = PYTHON_TOOLS[self.name]

    def config(self, *, base_url: str) -> str:
        """The per-rollout ``config.yaml`` text."""
        if self.context_length < MIN_CONTEXT_LENGTH:
            logger.debug("hermes: context_length %d raised to its minimum %d", self.context_length, MIN_CONTEXT_LENGTH)
        values = {
            "base_url": base_url.rstrip("/"),
            "model": self.model_name,
            "context_length": max(int(self.context_length), MIN_CONTEXT_LENGTH),
            "max_output_tokens": int(self.max_output_tokens),
            "max_retries": max(1, int(self.max_retries)),
        }
        # A JSON string or number is a valid YAML scalar with the same value, so json.dumps quotes safely.
        return Template(CONFIG_TEMPLATE.read_text()).substitute({k: json.dumps(v) for k, v in values.items()})

    def write_home(self, hermes_home: Path, *, base_url: str) -> None:
        """Write the per-rollout HERMES_HOME: config.yaml and a fresh update-check cache."""
        hermes_home.mkdir(parents=True, exist_ok=True)
        (hermes_home / "config.yaml").write_text(self.config(base_url=base_url))
        # hermes trusts this cache for 6 h; seeded "now" and "up to date", `hermes chat` skips pypi.org.
        seed = {"ts": time.time(), "behind": None, "rev": None, "ver": self._spec.requirement.split("==", 1)[1]}
        (hermes_home / ".update_check").write_text(json.dumps(seed))

    def command(self, instruction: str, *, step_limit: int) -> list[str]:
        """The ``hermes chat`` command line (without the sandbox wrapper)."""
        max_turns = max(1, int(step_limit) - 1)  # plus hermes's one summary call at the limit
        return [
            str(self.binary),
            "chat",
            f"--query={instruction}",  # "=" so that an instruction starting with "-" stays the value
            "--quiet",
            "--yolo",  # headless: nobody approves a command (we isolate outside)
            "--max-turns",
            str(max_turns),
            *self.extra_args,
        ]

    def env(self, *, hermes_home: Path, api_key: str) -> dict[str, str]:
        """Environment of the hermes process."""
        return base_env(
            {
                "HERMES_HOME": str(hermes_home),
                "HARNESS_RL_API_KEY": api_key,  # config.yaml refers to it; hermes needs >= 4 characters
                "HERMES_DISABLE_LAZY_INSTALLS": "1",  # the venv is read-only in the sandbox anyway
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONUNBUFFERED": "1",
            }
        )

    def run(
        self,
        task_workspace: Path,
        instruction: str,
        *,
        base_url: str,
        api_key: str,
        step_limit: int,
        timeout_s: float,
        rollout_dir: Path,
    ) -> HarnessOutcome:
        """See ``Harness.run``. Writes ``rollout_dir/harness/hermes/`` and ``rollout_dir/harness.{stdout,log}``."""
        if not self.binary.exists():
            raise self._not_installed()
        layout = SandboxLayout.for_rollout(
            rollout_dir, workspace=task_workspace, readonly=(venv_dir(self._spec, self.tools),)
        )
        layout.create()
        hermes_home = layout.writable[0] / "hermes"
        self.write_home(hermes_home, base_url=base_url)
        stdout_path = layout.home.parent / "harness.stdout"
        log_path = layout.home.parent / "harness.log"
        with open(stdout_path, "wb") as out, open(log_path, "wb") as log:
            result = self.sandbox.run(
                self.command(instruction, step_limit=step_limit),
                layout,
                env=self.env(hermes_home=hermes_home, api_key=api_key),
                timeout_s=timeout_s,
                stdout=out,
                stderr=log,
            )
        outcome = parse_hermes_home(
            hermes_home,
            stdout=stdout_path.read_text(errors="replace"),
            returncode=result.returncode,
            timed_out=result.timed_out,
        )
        outcome.seconds = result.seconds
        outcome.isolation = result.isolation
        if outcome.exit_kind in ("error", "no_output") and not outcome.error:
            outcome.error = tail(log_path) or stdout_path.read_text(errors="replace")[-2000:]
        return outcome


@dataclass
class _SessionRecord:
    api_calls: int = 0
    tool_calls: int = 0
    final_message: str = ""


def _read_session(state_db: Path) -> _SessionRecord | None:
    """The newest session's counters and last assistant text from hermes's ``state.db`` (None if absent)."""
    if not state_db.exists():
        return None
    # Read-only URI: never create or migrate the file, and never block on a lock a killed hermes left.
    with contextlib.closing(sqlite3.connect(f"{state_db.as_uri()}?mode=ro", uri=True, timeout=2)) as db:
        try:
            row = db.execute(
                "SELECT id, api_call_count, tool_call_count FROM sessions ORDER BY started_at DESC LIMIT 1"
            ).fetchone()
            if row is None:
                return None
            last = db.execute(
                "SELECT content FROM messages WHERE session_id = ? AND role = 'assistant' "
                "AND content IS NOT NULL AND content != '' ORDER BY id DESC LIMIT 1",
                (row[0],),
            ).fetchone()
            # One assistant message per model call. api_call_count alone undercounts: it leaves out the
            # summary call at the turn limit, and against the real engine a reply cut at max_tokens (hermes
            # then asks the model to continue) left it at 0 after two calls.
            (n_assistant,) = db.execute(
                "SELECT COUNT(*) FROM messages WHERE session_id = ? AND role = 'assistant'", (row[0],)
            ).fetchone()
        except sqlite3.DatabaseError as e:  # killed mid-write, or a schema we do not know
            logger.warning("hermes state.db unreadable (%s): %s", state_db, e)
            return None
    return _SessionRecord(max(int(row[1] or 0), int(n_assistant)), int(row[2] or 0), str(last[0]) if last else "")


def parse_hermes_home(hermes_home: Path, *, stdout: str, returncode: int, timed_out: bool = False) -> HarnessOutcome:
    """Read a finished (or killed) hermes run's records into a HarnessOutcome (seconds left to the caller)."""
    record = _read_session(hermes_home / "state.db")
    try:
        reasons = _TURN_ENDED.findall((hermes_home / "logs" / "agent.log").read_text(errors="replace"))
    except FileNotFoundError:
        reasons = []
    reason = reasons[-1] if reasons else ""
    final = (record.final_message if record else "") or stdout.strip()
    error = None
    if timed_out:
        kind: ExitKind = "timeout"
    elif reason.startswith("max_iterations_reached"):
        kind = "limits_exceeded"
    elif returncode == 0 and reason.startswith("text_response"):
        kind = "submitted"
    elif returncode == 0 and record is None and not reason:
        kind = "no_output"
    else:
        kind = "error"
        error = stdout.strip()[-2000:] or None
    return HarnessOutcome(
        exit_kind=kind,
        returncode=returncode,
        n_turns=record.api_calls if record else 0,
        final_message=final,
        error=error,
        seconds=0.0,
        timed_out=timed_out,
        n_tool_calls=record.tool_calls if record else 0,
        exit_status=reason,
        trajectory_path=hermes_home / "state.db" if record else None,
    )
