"""codex 0.171.0 (Rust, musl; node launcher), run headless once per rollout (streaming OpenAI Responses).

Per rollout, ``$CODEX_HOME/config.toml`` is rendered from ``configs/codex_config.toml``: the proxy's base
URL, the model id, the context window, low retry counts, and the keys that switch off every outbound call
(analytics, feedback, plugin sync, update check, hosted web search). The session key reaches codex through
the environment variable the config names (``env_key``), so it is never written to disk.

codex has no step or turn limit at all (333 requests in 20 s against a looping server), so the step limit is
the proxy's request budget: past it the proxy answers with plain text and codex ends its turn normally.
With the endpoint down it never exits on its own ("Reconnecting..."), so the wall-clock limit ends it.
codex also has no max-output-tokens setting and sends none; the session's sampling policy caps it.

The outcome comes from ``codex exec --json``: JSONL events ``thread.started``, ``turn.started``,
``item.started/completed`` (``command_execution``, ``agent_message``, ...), then ``turn.completed`` or
``turn.failed``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from string import Template

from harness_rl.harnesses.base import ExitKind, HarnessOutcome
from harness_rl.harnesses.common import CONFIG_DIR, read_jsonl, tail
from harness_rl.harnesses.install import (
    NPM_TOOLS,
    npm_prefix,
)
from harness_rl.harnesses.installed import NpmInstalled
from harness_rl.sandbox.base import Sandbox, SandboxLayout
from harness_rl.sandbox.local import LocalSandbox, base_env

logger = logging.getLogger(__name__)

CONFIG_TEMPLATE = CONFIG_DIR / "codex_config.toml"

#: RLIMIT_AS for codex (node launcher + Rust binary). The scripted session ran under the sandbox's 2 GiB
#: default; twice that leaves room for long sessions while a runaway command still cannot eat the machine.
ADDRESS_SPACE_BYTES = 4 << 30

#: Item types that are the harness acting on the workspace (what n_tool_calls counts).
_TOOL_ITEMS = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search"})


class Codex(NpmInstalled):
    """The codex harness.

    Args:
        sandbox: Where the process runs (default: a LocalSandbox with ``ADDRESS_SPACE_BYTES``).
        tools: The tools folder (default: ``install.tools_dir()``).
        model_name: The model id codex sends (the proxy ignores it and serves the session's adapter).
        context_length: ``model_context_window`` (also the auto-compaction threshold, so it never compacts).
        max_retries: ``request_max_retries`` and ``stream_max_retries``.
        extra_args: Further ``codex exec`` arguments (e.g. ``["-c", "key=value"]``), before the prompt.
    """

    name = "codex"
    dialect = "openai_responses"
    #: The harness's own shell tool and its command argument (what a scripted check calls).
    shell_tool = ("exec_command", "cmd")
    text_action_regex = None  # acts through tool calls only
    #: codex has no limit of its own: the rollout worker must set the proxy's request budget.
    step_limit_is_hard = False

    def __init__(
        self,
        *,
        sandbox: Sandbox | None = None,
        tools: Path | None = None,
        model_name: str = "harness-rl",
        context_length: int = 32768,
        max_retries: int = 1,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.sandbox = sandbox or LocalSandbox(address_space_bytes=ADDRESS_SPACE_BYTES)
        self.tools = tools
        self.model_name = model_name
        self.context_length = context_length
        self.max_retries = max_retries
        self.extra_args = tuple(extra_args)
        self._spec = NPM_TOOLS[self.name]

    def config(self, *, base_url: str) -> str:
        """The per-rollout ``config.toml`` text."""
        values = {
            "model": self.model_name,
            "base_url": base_url.rstrip("/"),
            "context_length": int(self.context_length),
            "max_retries": int(self.max_retries),
        }
        # JSON string/int literals are valid TOML basic strings/integers, so json.dumps quotes safely.
        return Template(CONFIG_TEMPLATE.read_text()).substitute({k: json.dumps(v) for k, v in values.items()})

    def command(self, instruction: str, workspace: Path) -> list[str]:
        """The ``codex exec`` command line (without the sandbox wrapper)."""
        argv = [
            str(self.binary),
            "exec",
            "--json",
            "--skip-git-repo-check",  # task folders are not git repositories
            "--ephemeral",  # no session files: the proxy captures the calls
            "-C",
            str(workspace),
            *self.extra_args,
        ]
        # "--" so that an instruction starting with "-" is never read as an option.
        return argv + ["--", instruction]

    def env(self, *, codex_home: Path, api_key: str) -> dict[str, str]:
        """Environment of the codex process."""
        return base_env({"CODEX_HOME": str(codex_home), "HARNESS_RL_API_KEY": api_key, "NO_COLOR": "1"})

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
        """See ``Harness.run``. ``step_limit`` is not enforced here (see ``step_limit_is_hard``).

        Writes ``rollout_dir/harness/codex/config.toml``, ``rollout_dir/harness.stdout`` (codex's events)
        and ``rollout_dir/harness.log``.
        """
        if not self.binary.exists():
            raise self._not_installed()
        layout = SandboxLayout.for_rollout(rollout_dir, workspace=task_workspace, readonly=(npm_prefix(self.tools),))
        layout.create()
        codex_home = layout.writable[0] / "codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(self.config(base_url=base_url))
        stdout_path = layout.home.parent / "harness.stdout"
        log_path = layout.home.parent / "harness.log"
        with open(stdout_path, "wb") as out, open(log_path, "wb") as log:
            result = self.sandbox.run(
                self.command(instruction, layout.workspace),
                layout,
                env=self.env(codex_home=codex_home, api_key=api_key),
                timeout_s=timeout_s,
                stdout=out,
                stderr=log,
            )
        outcome = parse_events(stdout_path, returncode=result.returncode, timed_out=result.timed_out)
        outcome.seconds = result.seconds
        outcome.isolation = result.isolation
        if outcome.exit_kind in ("error", "no_output") and not outcome.error:
            outcome.error = tail(log_path)
        return outcome


def parse_events(stdout_path: Path, *, returncode: int, timed_out: bool = False) -> HarnessOutcome:
    """Read ``codex exec --json`` events into a HarnessOutcome (seconds left to the caller).

    codex reports no per-request count, so ``n_turns`` counts what each model call ends in: a tool item or
    an agent message. That is exact for one call per reply and an upper bound otherwise (a reply with text
    and a call, or parallel calls); the captured graph has the exact number.
    """
    events = read_jsonl(stdout_path)
    items = [e["item"] for e in events if e.get("type") == "item.completed" and isinstance(e.get("item"), dict)]
    n_tool_calls = sum(1 for i in items if i.get("type") in _TOOL_ITEMS)
    messages = [str(i.get("text") or "") for i in items if i.get("type") == "agent_message"]
    n_turns = n_tool_calls + len(messages)
    final = messages[-1] if messages else ""
    types = [e.get("type") for e in events]
    error = None
    if timed_out:
        kind: ExitKind = "timeout"
    elif "turn.failed" in types or "error" in types:
        kind = "error"
        failed = next(e for e in reversed(events) if e.get("type") in ("turn.failed", "error"))
        error = str((failed.get("error") or {}).get("message") or failed.get("message") or failed)
    elif "turn.completed" in types:
        kind = "submitted"
    else:
        kind = "no_output" if returncode == 0 else "error"
    return HarnessOutcome(
        exit_kind=kind,
        returncode=returncode,
        n_turns=n_turns,
        final_message=final,
        error=error,
        seconds=0.0,
        timed_out=timed_out,
        n_tool_calls=n_tool_calls,
        exit_status=next((t for t in reversed(types) if t in ("turn.completed", "turn.failed", "error")), ""),
    )
