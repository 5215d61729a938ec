"""opencode (``opencode-ai`` 1.18.33, a Bun binary), run headless once per rollout (streaming OpenAI chat).

Per rollout, ``rollout_dir/harness/opencode.json`` (``OPENCODE_CONFIG``) is filled from
``configs/opencode.json``: one ``@ai-sdk/openai-compatible`` provider pointing at the proxy with the rollout
key read from an env var, the model's context and output limits, no autoupdate or sharing, ``webfetch`` denied
(it would reach the internet) and ``agent.build.steps`` set to the step limit. opencode runs as
``opencode run --title task --format json``: ``--title`` avoids an extra title-generation model call, and
stdout is its JSONL event stream (kept outside the sandbox as ``rollout_dir/harness.stdout``).

Outbound calls: the ``OPENCODE_DISABLE_*`` variables below stop the models.dev fetch, autoupdate, LSP downloads
and sharing, but opencode also npm-installs ``@opencode-ai/plugin`` into ``~/.config/opencode`` at start
(registry.npmjs.org) unless it is already there. ``install()`` therefore also installs it into a template
(``<tools>/opencode-home/.config/opencode``), and each rollout's HOME gets a copy of its package files with
``node_modules`` linked to the template (verified with strace: only the proxy is contacted).

The step limit is soft: past ``steps`` opencode asks the model for a text-only answer but still runs any tool
call it gets, so the proxy's request budget must enforce the limit (``step_limit_is_hard = False``). A run the
budget ended is reported as ``limits_exceeded``.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from harness_rl.harnesses.base import ExitKind, HarnessNotInstalledError, HarnessOutcome
from harness_rl.harnesses.common import BUN_ADDRESS_SPACE_BYTES, read_jsonl, tail, write_json_template
from harness_rl.harnesses.install import (
    NPM_TOOLS,
    install_command,
    install_npm_into,
    install_npm_tool,
    npm_prefix,
    read_npm_stamp,
    tools_dir,
)
from harness_rl.harnesses.installed import NpmInstalled
from harness_rl.proxy.relay import BUDGET_MESSAGE
from harness_rl.sandbox.base import Sandbox, SandboxLayout
from harness_rl.sandbox.local import LocalSandbox, base_env

logger = logging.getLogger(__name__)

API_KEY_ENV = "HARNESS_RL_API_KEY"
PROVIDER = "harness-rl"
#: Package opencode installs into its config dir at start unless present (pinned to opencode's version).
PLUGIN_REQUIREMENT = "@opencode-ai/plugin@1.18.33"


class OpenCode(NpmInstalled):
    """The opencode harness.

    Args:
        sandbox: Where the process runs (default: a LocalSandbox with an address-space cap Bun can live with).
        tools: The tools folder (default: ``install.tools_dir()``).
        model_name: Model id opencode sends (the proxy serves its own model whatever the name).
        context_length: The model's context window (``limit.context``; drives opencode's compaction).
        max_output_tokens: ``limit.output``, sent as ``max_tokens`` (opencode's default is 32000).
        compaction: Whether opencode may summarize the conversation near the context limit (an extra model
            call outside the agent loop); off by default.
    """

    name = "opencode"
    dialect = "openai_chat"
    #: opencode's ``steps`` only asks the model to stop; the proxy's request budget has to end the run.
    step_limit_is_hard = False
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
    ) -> None:
        self.sandbox = sandbox or LocalSandbox(address_space_bytes=BUN_ADDRESS_SPACE_BYTES)
        self.tools = tools
        self.model_name = model_name
        self.context_length = context_length
        self.max_output_tokens = max_output_tokens
        self.compaction = compaction
        self._spec = NPM_TOOLS[self.name]

    @property
    def config_template(self) -> Path:
        """The template ``~/.config/opencode`` with the plugin SDK preinstalled."""
        return (self.tools or tools_dir()) / "opencode-home" / ".config" / "opencode"

    def install(self) -> Path:
        """See ``Harness.install``; also installs the plugin SDK template."""
        binary = install_npm_tool(self._spec, self.tools)
        install_npm_into(self.config_template, [PLUGIN_REQUIREMENT], tools=self.tools)
        return binary

    def is_installed(self) -> bool:
        """See ``Harness.is_installed``."""
        return read_npm_stamp(self._spec, self.tools) is not None and self._template_ready()

    def _template_ready(self) -> bool:
        return (self.config_template / "node_modules" / "@opencode-ai" / "plugin" / "package.json").exists()

    def _not_installed(self) -> HarnessNotInstalledError:
        return HarnessNotInstalledError(
            f"opencode ({self._spec.requirement} with {PLUGIN_REQUIREMENT}) is not installed at {self.binary}; "
            f"install it with: {install_command(self.name)}"
        )

    def write_config(self, path: Path, *, base_url: str, step_limit: int) -> None:
        """Write the rollout's ``opencode.json`` from the template."""
        values = {
            "base_url": base_url,
            "model": self.model_name,
            "context_length": int(self.context_length),
            "max_output_tokens": int(self.max_output_tokens),
            "step_limit": int(step_limit),
        }
        write_json_template("opencode.json", path, values)

    def seed_home(self, home: Path) -> None:
        """Give the rollout's HOME the preinstalled plugin SDK, so opencode does not npm-install it.

        The package files are copied (opencode may rewrite them); ``node_modules`` (64 MB) is a link to the
        shared template, which the sandbox shows read-only.
        """
        config_dir = home / ".config" / "opencode"
        config_dir.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(self.config_template / name, config_dir / name)
        link = config_dir / "node_modules"
        if not link.is_symlink():
            link.symlink_to(self.config_template / "node_modules")

    def command(self, instruction: str) -> list[str]:
        """The opencode command line (without the sandbox wrapper)."""
        return [str(self.binary), "run", "--title", "task", "--format", "json", instruction]

    def env(self, *, config_path: Path, api_key: str) -> dict[str, str]:
        """Environment of the opencode process: its config, the key, and every outbound extra off."""
        extra = {
            "OPENCODE_CONFIG": str(config_path),
            API_KEY_ENV: api_key,
            "OPENCODE_DISABLE_MODELS_FETCH": "1",  # models.opencode.ai
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # do not read ~/.claude prompts and skills
            "NO_COLOR": "1",
        }
        if not self.compaction:
            extra["OPENCODE_DISABLE_AUTOCOMPACT"] = "1"
        return base_env(extra)

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
        if not self.binary.exists() or not self._template_ready():
            raise self._not_installed()
        layout = SandboxLayout.for_rollout(
            rollout_dir, workspace=task_workspace, readonly=(npm_prefix(self.tools), self.config_template)
        )
        layout.create()
        self.seed_home(layout.home)
        config_path = layout.writable[0] / "opencode.json"
        self.write_config(config_path, base_url=base_url, step_limit=step_limit)
        events_path = layout.home.parent / "harness.stdout"
        log_path = layout.home.parent / "harness.log"
        with open(events_path, "wb") as events, open(log_path, "wb") as log:
            result = self.sandbox.run(
                self.command(instruction),
                layout,
                env=self.env(config_path=config_path, api_key=api_key),
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
    """Read opencode's ``--format json`` event stream into a HarnessOutcome (seconds and paths left to the caller).

    Each model call is a ``step_start`` ... ``step_finish`` pair (``part.reason``: ``tool-calls``, ``stop``,
    ``length``, ...); each tool run is a ``tool_use`` event; assistant text comes as ``text`` events; a failure
    is an ``error`` event (``error.data.message``).
    """
    steps = [e.get("part") or {} for e in events if e.get("type") == "step_finish"]
    n_tool_calls = sum(1 for e in events if e.get("type") == "tool_use")
    texts = [str((e.get("part") or {}).get("text") or "") for e in events if e.get("type") == "text"]
    final = next((t for t in reversed(texts) if t.strip()), "")
    errors = [e.get("error") or {} for e in events if e.get("type") == "error"]
    reason = str(steps[-1].get("reason") or "") if steps else ""
    n_turns = max(len(steps), sum(1 for e in events if e.get("type") == "step_start"))
    error = None
    kind: ExitKind
    if timed_out:
        kind = "timeout"
    elif errors:
        kind = "error"
        error = _error_text(errors[-1])
    elif final.strip() == BUDGET_MESSAGE:
        kind = "limits_exceeded"  # the proxy's request budget answered the last call
    elif not steps:
        kind = "no_output" if returncode == 0 else "error"
        error = None if returncode == 0 else (stderr.strip()[-2000:] or f"opencode exited {returncode}")
    elif returncode == 0 and reason in ("stop", "length"):
        kind = "submitted"
    else:
        kind = "error"
        error = stderr.strip()[-2000:] or f"opencode exited {returncode} after a step ending {reason!r}"
    return HarnessOutcome(
        exit_kind=kind,
        returncode=returncode,
        n_turns=n_turns,
        final_message=final,
        error=error,
        seconds=0.0,
        timed_out=timed_out,
        n_tool_calls=n_tool_calls,
        exit_status=reason if not errors else str(errors[-1].get("name") or "error"),
    )


def _error_text(error: dict[str, Any]) -> str:
    data = error.get("data") or {}
    message = data.get("message") if isinstance(data, dict) else None
    return f"{error.get('name') or 'error'}: {message or data or error}"
