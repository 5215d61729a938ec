"""claude-code 2.1.332 (native Bun binary), run headless once per rollout (streaming Anthropic Messages).

claude is configured through environment variables only; ``configs/claude_code_env.json`` is the template
(rendered per rollout with the proxy's base URL, the session key and the limits):

* ``ANTHROPIC_BASE_URL`` is the proxy root (claude appends ``/v1/messages?beta=true``) and
  ``ANTHROPIC_API_KEY`` the session key (sent as ``x-api-key``, which the proxy reads).
* ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` alone stops every outbound call (api.anthropic.com and the
  ``HEAD /api/hello`` probe); ``DISABLE_TELEMETRY`` or ``DISABLE_ERROR_REPORTING`` alone did not.
* ``CLAUDE_CODE_MAX_CONTEXT_TOKENS`` only takes effect together with ``DISABLE_COMPACT`` (otherwise an
  unknown model is assumed to have a 1M window). Compaction would rewrite the conversation mid-rollout
  anyway, which breaks the prefix sharing the captured graph relies on.
* ``CLAUDE_CODE_MAX_RETRIES`` is low: with claude's default a dead endpoint was still being retried after
  150 s; with 1 it fails in ~1.5 s.
* ``IS_SANDBOX=1``: as root, ``--dangerously-skip-permissions`` is refused without it.

The step limit is ``--max-turns`` (a hard stop: claude makes at most that many model calls, then exits 1
with ``subtype error_max_turns``). The outcome comes from ``--output-format stream-json --verbose``: one
JSON event per line, the assistant messages (model calls, tool calls) and last the ``result`` object
(``terminal_reason``, ``is_error``, ``result`` text).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from harness_rl.harnesses.base import ExitKind, HarnessOutcome
from harness_rl.harnesses.common import CONFIG_DIR, fill_template, read_jsonl, tail
from harness_rl.harnesses.install import (
    NPM_TOOLS,
    npm_prefix,
)
from harness_rl.harnesses.installed import NpmInstalled
from harness_rl.sandbox.base import Sandbox, SandboxLayout
from harness_rl.sandbox.local import LocalSandbox, base_env

logger = logging.getLogger(__name__)

ENV_TEMPLATE = CONFIG_DIR / "claude_code_env.json"

#: RLIMIT_AS for claude. The scripted session (Bash tool, two turns) ran under the sandbox's 2 GiB default;
#: twice that leaves room for long sessions while a runaway command's output still cannot eat the machine.
ADDRESS_SPACE_BYTES = 4 << 30

#: "blocking_limit": claude refused the next turn because its context use neared ``CLAUDE_CODE_MAX_CONTEXT_TOKENS``
#: (result text "Prompt is too long"); seen against the real engine with a 4,096-token window after one 1,229-token
#: call. Its own limit, like max_turns, so the rollout stays scorable.
_TERMINAL_REASONS: dict[str, ExitKind] = {
    "completed": "submitted",
    "max_turns": "limits_exceeded",
    "blocking_limit": "limits_exceeded",
}


class ClaudeCode(NpmInstalled):
    """The claude-code harness.

    Args:
        sandbox: Where the process runs (default: a LocalSandbox with ``ADDRESS_SPACE_BYTES``).
        tools: The tools folder (default: ``install.tools_dir()``).
        model_name: The model id claude sends (the proxy ignores it and serves the session's adapter).
        context_length: The context window claude plans for (``CLAUDE_CODE_MAX_CONTEXT_TOKENS``).
        max_output_tokens: ``max_tokens`` of each request (claude's default is 32000).
        max_retries: ``CLAUDE_CODE_MAX_RETRIES``; low so a dead endpoint ends the run fast.
        bare: Pass ``--bare`` (3 tools and a short system prompt instead of claude's full setup).
        extra_args: Further command-line arguments, appended before the prompt.
    """

    name = "claude_code"
    dialect = "anthropic_messages"
    #: The harness's own shell tool and its command argument (what a scripted check calls).
    shell_tool = ("Bash", "command")
    text_action_regex = None  # acts through tool calls only
    #: ``--max-turns`` stops claude itself at ``step_limit`` model calls.
    step_limit_is_hard = True

    def __init__(
        self,
        *,
        sandbox: Sandbox | None = None,
        tools: Path | None = None,
        model_name: str = "harness-rl",
        context_length: int = 32768,
        max_output_tokens: int = 4096,
        max_retries: int = 1,
        bare: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.sandbox = sandbox or LocalSandbox(address_space_bytes=ADDRESS_SPACE_BYTES)
        self.tools = tools
        self.model_name = model_name
        self.context_length = context_length
        self.max_output_tokens = max_output_tokens
        self.max_retries = max_retries
        self.bare = bare
        self.extra_args = tuple(extra_args)
        self._spec = NPM_TOOLS[self.name]

    def command(self, instruction: str, *, step_limit: int) -> list[str]:
        """The claude command line (without the sandbox wrapper)."""
        argv = [
            str(self.binary),
            "-p",
            "--model",
            self.model_name,
            "--dangerously-skip-permissions",  # we isolate outside; there is nobody to approve a tool call
            "--max-turns",
            str(max(1, int(step_limit))),
            "--output-format",
            "stream-json",
            "--verbose",  # stream-json requires it
            "--no-session-persistence",  # no transcript under ~/.claude/projects: the proxy captures the calls
        ]
        if self.bare:
            argv.append("--bare")
        # "--" so that an instruction starting with "-" is never read as an option.
        return argv + list(self.extra_args) + ["--", instruction]

    def env(self, *, base_url: str, api_key: str) -> dict[str, str]:
        """Environment of the claude process, rendered from ``configs/claude_code_env.json``."""
        values = {
            # claude appends /v1/messages itself; the Harness protocol hands us the OpenAI-style ".../v1".
            "base_url": base_url.rstrip("/").removesuffix("/v1"),
            "api_key": api_key,
            "model": self.model_name,
            "max_output_tokens": self.max_output_tokens,
            "context_length": self.context_length,
            "max_retries": self.max_retries,
        }
        rendered = fill_template(json.loads(ENV_TEMPLATE.read_text()), values)
        return base_env({k: str(v) for k, v in rendered.items()})

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
        """See ``Harness.run``. Writes ``rollout_dir/harness.stdout`` (claude's events) and ``harness.log``."""
        if not self.binary.exists():
            raise self._not_installed()
        layout = SandboxLayout.for_rollout(rollout_dir, workspace=task_workspace, readonly=(npm_prefix(self.tools),))
        layout.create()
        stdout_path = layout.home.parent / "harness.stdout"
        log_path = layout.home.parent / "harness.log"
        argv = self.command(instruction, step_limit=step_limit)
        with open(stdout_path, "wb") as out, open(log_path, "wb") as log:
            result = self.sandbox.run(
                argv,
                layout,
                env=self.env(base_url=base_url, api_key=api_key),
                timeout_s=timeout_s,
                stdout=out,
                stderr=log,
            )
        outcome = parse_result(
            stdout_path, returncode=result.returncode, timed_out=result.timed_out, max_turns=max(1, int(step_limit))
        )
        outcome.seconds = result.seconds
        outcome.isolation = result.isolation
        if outcome.exit_kind in ("error", "no_output") and not outcome.error:
            outcome.error = tail(log_path)
        return outcome


def parse_result(
    stdout_path: Path, *, returncode: int, timed_out: bool = False, max_turns: int | None = None
) -> HarnessOutcome:
    """Read claude's ``stream-json`` events into a HarnessOutcome (seconds left to the caller).

    Model calls are counted as distinct assistant message ids (claude emits one event per content block).
    Without any, claude's own ``num_turns`` is used, capped at ``max_turns``: it counts the turn the limit
    refused too (``--max-turns 2``: 2 model calls, ``num_turns`` 3).
    """
    events = read_jsonl(stdout_path)
    assistant = [e["message"] for e in events if e.get("type") == "assistant" and isinstance(e.get("message"), dict)]
    n_tool_calls = sum(
        1
        for m in assistant
        for block in m.get("content") or []
        if isinstance(block, dict) and block.get("type") == "tool_use"
    )
    message_ids = {m.get("id") for m in assistant}
    result = next((e for e in reversed(events) if e.get("type") == "result"), None)
    if result is None:
        kind: ExitKind = "timeout" if timed_out else ("no_output" if returncode == 0 else "error")
        return HarnessOutcome(kind, returncode, len(message_ids), "", None, 0.0, timed_out, n_tool_calls)
    terminal = str(result.get("terminal_reason") or "")
    n_turns = len(message_ids) or int(result.get("num_turns") or 0)
    if max_turns is not None:
        n_turns = min(n_turns, max_turns)
    final = str(result.get("result") or "")
    error = None
    if timed_out:
        kind = "timeout"
    elif terminal in _TERMINAL_REASONS and not (terminal == "completed" and result.get("is_error")):
        kind = _TERMINAL_REASONS[terminal]
    else:
        kind = "error"
        error = final or result.get("api_error") or f"terminal_reason={terminal!r} subtype={result.get('subtype')!r}"
    return HarnessOutcome(
        exit_kind=kind,
        returncode=returncode,
        n_turns=n_turns,
        final_message=final,
        error=error,
        seconds=0.0,
        timed_out=timed_out,
        n_tool_calls=n_tool_calls,
        exit_status=terminal or str(result.get("subtype") or ""),
    )
