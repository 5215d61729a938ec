"""pi (``@mariozechner/pi-coding-agent`` 0.73.1), run headless once per rollout (streaming OpenAI chat).

Per rollout, ``rollout_dir/harness/pi-agent`` is pi's agent directory (``PI_CODING_AGENT_DIR``; even
``pi --help`` writes there) with ``models.json`` (one provider pointing at the proxy, the rollout key read from
an env var, the model's context length and output cap) and ``settings.json`` (compaction, retries), both filled
from templates in ``configs/``. pi runs as ``pi -p --mode json --no-session``: stdout is its JSONL event stream
(kept outside the sandbox as ``rollout_dir/harness.stdout``), from which the outcome is read.

pi has no step limit of its own; ``configs/pi_step_limit.ts``, loaded with ``-e``, aborts the run once the
limit's model calls are made and the agent would go on, which makes the limit hard. ``PI_OFFLINE=1`` turns off
its version check, install ping and tool downloads (it made no outbound call in ``-p`` mode even without it).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from harness_rl.harnesses.base import ExitKind, HarnessOutcome
from harness_rl.harnesses.common import CONFIG_DIR, NODE_ADDRESS_SPACE_BYTES, read_jsonl, tail, write_json_template
from harness_rl.harnesses.install import (
    NPM_TOOLS,
    npm_prefix,
)
from harness_rl.harnesses.installed import NpmInstalled
from harness_rl.proxy.relay import BUDGET_MESSAGE
from harness_rl.sandbox.base import Sandbox, SandboxLayout
from harness_rl.sandbox.local import LocalSandbox, base_env

logger = logging.getLogger(__name__)

STEP_LIMIT_EXTENSION = CONFIG_DIR / "pi_step_limit.ts"
#: The line the step-limit extension prints on stderr when it stops the run.
STEP_LIMIT_MARKER = "harness-rl: step limit reached"
PROVIDER = "harness-rl"
API_KEY_ENV = "HARNESS_RL_API_KEY"


class Pi(NpmInstalled):
    """The pi harness.

    Args:
        sandbox: Where the process runs (default: a LocalSandbox with an address-space cap Node can live with).
        tools: The tools folder (default: ``install.tools_dir()``).
        model_name: Model id pi sends (the proxy serves its own model whatever the name).
        context_length: The model's context window (pi's ``contextWindow``; drives its compaction).
        max_output_tokens: pi's ``maxTokens``, sent as ``max_completion_tokens`` (its default is 16384).
        compaction: Whether pi may summarize the conversation when it nears the context window. Off by default:
            the summary is an extra model call outside the agent loop, and with small windows it fires on
            every turn.
        max_retries: pi's agent-level retries of a failed model call (1 s, 2 s, ... backoff; default 3).
    """

    name = "pi"
    dialect = "openai_chat"
    #: The extension stops pi at the step limit, so the proxy's request budget is only a backstop.
    step_limit_is_hard = True
    #: (tool name, its command argument): what a scripted upstream calls to run one shell command.
    shell_tool = ("bash", "command")
    text_action_regex = None  # acts through tool calls only

    def __init__(
        self,
        *,
        sandbox: Sandbox | None = None,
        tools: Path | None = None,
        model_name: str = "harness-rl",
        context_length: int = 32768,
        max_output_tokens: int = 4096,
        compaction: bool = False,
        max_retries: int = 1,
    ) -> None:
        self.sandbox = sandbox or LocalSandbox(address_space_bytes=NODE_ADDRESS_SPACE_BYTES)
        self.tools = tools
        self.model_name = model_name
        self.context_length = context_length
        self.max_output_tokens = max_output_tokens
        self.compaction = compaction
        self.max_retries = max_retries
        self._spec = NPM_TOOLS[self.name]

    def write_config(self, agent_dir: Path, *, base_url: str) -> None:
        """Write ``models.json`` and ``settings.json`` into pi's agent directory for one rollout."""
        values = {
            "base_url": base_url,
            "model": self.model_name,
            "context_length": int(self.context_length),
            "max_output_tokens": int(self.max_output_tokens),
            "compaction": bool(self.compaction),
            "max_retries": int(self.max_retries),
        }
        write_json_template("pi_models.json", agent_dir / "models.json", values)
        write_json_template("pi_settings.json", agent_dir / "settings.json", values)

    def command(self, instruction: str) -> list[str]:
        """The pi command line (without the sandbox wrapper)."""
        return [
            str(self.binary),
            "-p",
            "--mode",
            "json",
            "--no-session",
            "--provider",
            PROVIDER,
            "--model",
            self.model_name,
            "-e",
            str(STEP_LIMIT_EXTENSION),
            instruction,
        ]

    def env(self, *, agent_dir: Path, api_key: str, step_limit: int) -> dict[str, str]:
        """Environment of the pi process: its agent dir, the key, the step limit, and nothing outbound."""
        return base_env(
            {
                "PI_CODING_AGENT_DIR": str(agent_dir),
                "PI_OFFLINE": "1",  # no version check, install ping or rg/fd download
                "PI_SKIP_VERSION_CHECK": "1",
                "PI_TELEMETRY": "0",
                API_KEY_ENV: api_key,
                "HARNESS_RL_MAX_TURNS": str(int(step_limit)),
                "NO_COLOR": "1",
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
        """See ``Harness.run``. Writes ``rollout_dir/harness.log`` (stderr) and ``harness.stdout``."""
        if not self.binary.exists():
            raise self._not_installed()
        layout = SandboxLayout.for_rollout(
            rollout_dir, workspace=task_workspace, readonly=(npm_prefix(self.tools), CONFIG_DIR)
        )
        layout.create()
        agent_dir = layout.writable[0] / "pi-agent"
        self.write_config(agent_dir, base_url=base_url)
        events_path = layout.home.parent / "harness.stdout"
        log_path = layout.home.parent / "harness.log"
        with open(events_path, "wb") as events, open(log_path, "wb") as log:
            result = self.sandbox.run(
                self.command(instruction),
                layout,
                env=self.env(agent_dir=agent_dir, api_key=api_key, step_limit=step_limit),
                timeout_s=timeout_s,
                stdout=events,
                stderr=log,
            )
        outcome = parse_events(
            read_jsonl(events_path), returncode=result.returncode, timed_out=result.timed_out, stderr=tail(log_path)
        )
        outcome.seconds = result.seconds
        outcome.isolation = result.isolation
        outcome.trajectory_path = events_path
        return outcome


def parse_events(
    events: list[dict[str, Any]], *, returncode: int, timed_out: bool = False, stderr: str = ""
) -> HarnessOutcome:
    """Read pi's ``--mode json`` event stream into a HarnessOutcome (seconds and paths left to the caller).

    Each model call ends with an assistant ``message_end`` whose ``stopReason`` is ``stop``, ``toolUse``,
    ``length``, ``error`` or ``aborted`` (then ``errorMessage`` says why); each executed tool ends with
    ``tool_execution_end``.
    """
    assistant = [
        e["message"]
        for e in events
        if e.get("type") == "message_end" and (e.get("message") or {}).get("role") == "assistant"
    ]
    n_tool_calls = sum(1 for e in events if e.get("type") == "tool_execution_end")
    last = assistant[-1] if assistant else {}
    stop_reason = str(last.get("stopReason") or "")
    final = next((t for t in (_text(m) for m in reversed(assistant)) if t), "")
    error = None
    kind: ExitKind
    if timed_out:
        kind = "timeout"
    elif STEP_LIMIT_MARKER in stderr or final.strip() == BUDGET_MESSAGE:
        kind = "limits_exceeded"  # our extension stopped it, or the proxy's request budget answered last
    elif not assistant:
        kind = "no_output" if returncode == 0 else "error"
        error = None if returncode == 0 else (stderr.strip()[-2000:] or f"pi exited {returncode}")
    elif returncode == 0 and stop_reason in ("stop", "length"):
        kind = "submitted"
    else:
        kind = "error"
        error = last.get("errorMessage") or stderr.strip()[-2000:] or f"pi exited {returncode}"
    return HarnessOutcome(
        exit_kind=kind,
        returncode=returncode,
        n_turns=len(assistant),
        final_message=final,
        error=error,
        seconds=0.0,
        timed_out=timed_out,
        n_tool_calls=n_tool_calls,
        exit_status=stop_reason,
    )


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or []
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
