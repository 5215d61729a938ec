"""mini-swe-agent 2.4.6, run headless once per rollout (non-streaming OpenAI chat through litellm).

Text mode (default) uses ``--model-class litellm_textbased`` with our config
``configs/mini_swe_agent_text.yaml``: the model acts by writing a ```bash block (only the first one
counts), which the 135M embedded model does; it cannot produce valid tool calls. Tool mode uses mini's own
``mini.yaml`` (one ``bash`` tool). The run's outcome comes from the trajectory file mini writes after every
step: ``info.exit_status`` (Submitted / LimitsExceeded / RepeatedFormatError / an exception class name) and
its messages. mini exits 0 for all of those, so the return code says little.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from harness_rl.harnesses.base import ExitKind, HarnessOutcome
from harness_rl.harnesses.install import (
    PYTHON_TOOLS,
    venv_dir,
)
from harness_rl.harnesses.installed import VenvInstalled
from harness_rl.sandbox.base import Sandbox, SandboxLayout
from harness_rl.sandbox.local import LocalSandbox, base_env

logger = logging.getLogger(__name__)

TEXT_CONFIG = Path(__file__).parent / "configs" / "mini_swe_agent_text.yaml"

_EXIT_KINDS: dict[str, ExitKind] = {
    "Submitted": "submitted",
    "LimitsExceeded": "limits_exceeded",
    "TimeExceeded": "limits_exceeded",
    "RepeatedFormatError": "format_error",
}


class MiniSweAgent(VenvInstalled):
    """The mini-swe-agent harness.

    Args:
        mode: "text" (```bash blocks, our config) or "tool" (mini's default tool-calling config).
        sandbox: Where the process runs (default: a LocalSandbox).
        tools: The tools folder (default: ``install.tools_dir()``).
        model_name: litellm model name; ``openai/<anything>`` (the proxy ignores the name).
        model_attempts: ``MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT``; low, so a dead endpoint ends the run fast
            (mini's default is 10 attempts with 4-60 s backoff).
        command_timeout_s: mini's per-command timeout (``environment.timeout``).
        extra_config: Further ``-c`` specs appended last (e.g. ``"model.model_kwargs.extra_headers=..."``).
    """

    name = "mini_swe_agent"
    dialect = "openai_chat"
    #: ``agent.step_limit`` stops mini after that many model calls (exit status LimitsExceeded).
    step_limit_is_hard = True
    #: mini's one tool in tool mode; in text mode the same command goes in a ```bash block instead.
    shell_tool = ("bash", "command")

    @property
    def text_action_regex(self) -> str | None:
        """The action regex of text mode (from our config), None in tool mode; see ``Harness``."""
        if self.mode != "text":
            return None
        return yaml.safe_load(TEXT_CONFIG.read_text())["model"]["action_regex"]

    def __init__(
        self,
        *,
        mode: Literal["text", "tool"] = "text",
        sandbox: Sandbox | None = None,
        tools: Path | None = None,
        model_name: str = "openai/harness-rl",
        model_attempts: int = 2,
        command_timeout_s: int = 30,
        extra_config: Sequence[str] = (),
    ) -> None:
        if mode not in ("text", "tool"):
            raise ValueError(f"mode must be 'text' or 'tool', got {mode!r}")
        self.mode = mode
        self.sandbox = sandbox or LocalSandbox()
        self.tools = tools
        self.model_name = model_name
        self.model_attempts = model_attempts
        self.command_timeout_s = command_timeout_s
        self.extra_config = tuple(extra_config)
        self._spec = PYTHON_TOOLS[self.name]

    def command(self, instruction: str, *, base_url: str, api_key: str, step_limit: int, trajectory: Path) -> list[str]:
        """The mini command line (without the sandbox wrapper)."""

        def spec(key: str, value: Any) -> str:
            # mini json-decodes each value: JSON-encode so a key like "123" or "true" stays a string.
            return f"{key}={json.dumps(value)}"

        config = str(TEXT_CONFIG) if self.mode == "text" else "mini.yaml"
        argv = [
            str(self.binary),
            "-m",
            self.model_name,
            f"--task={instruction}",
            "--yolo",
            "--exit-immediately",
        ]
        if self.mode == "text":
            argv += ["--model-class", "litellm_textbased"]
        for c in (
            config,
            spec("agent.step_limit", int(step_limit)),
            spec("agent.cost_limit", 0),
            spec("environment.timeout", int(self.command_timeout_s)),
            spec("model.model_kwargs.api_base", base_url),
            spec("model.model_kwargs.api_key", api_key),
            *self.extra_config,
        ):
            argv += ["-c", c]
        return argv + ["-o", str(trajectory)]

    def env(self, layout: SandboxLayout) -> dict[str, str]:
        """Environment of the mini process: no first-run wizard, no telemetry or cost-map download."""
        harness_dir = layout.writable[0] if layout.writable else layout.home
        return base_env(
            {
                "MSWEA_CONFIGURED": "1",  # skip the interactive setup wizard
                "MSWEA_SILENT_STARTUP": "1",
                "MSWEA_COST_TRACKING": "ignore_errors",  # our model name has no price: cost calc would raise
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # otherwise litellm fetches the map from GitHub
                "MSWEA_GLOBAL_CONFIG_DIR": str(harness_dir / "mswea"),
                "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": str(self.model_attempts),
                "PYTHONDONTWRITEBYTECODE": "1",  # the venv is read-only inside the sandbox
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
        """See ``Harness.run``. Writes ``rollout_dir/harness.log`` and ``rollout_dir/harness/traj.json``."""
        if not self.binary.exists():
            raise self._not_installed()
        layout = SandboxLayout.for_rollout(
            rollout_dir, workspace=task_workspace, readonly=(venv_dir(self._spec, self.tools),)
        )
        layout.create()
        trajectory = layout.writable[0] / "traj.json"
        trajectory.unlink(missing_ok=True)
        argv = self.command(
            instruction, base_url=base_url, api_key=api_key, step_limit=step_limit, trajectory=trajectory
        )
        log_path = layout.home.parent / "harness.log"
        with open(log_path, "wb") as log:
            started_at = time.time()
            result = self.sandbox.run(argv, layout, env=self.env(layout), timeout_s=timeout_s, stdout=log, stderr=log)
        outcome = parse_trajectory(trajectory, timed_out=result.timed_out)
        outcome.returncode = result.returncode
        outcome.seconds = result.seconds
        outcome.isolation = result.isolation
        outcome.started_at = started_at
        if outcome.exit_kind in ("error", "no_output") and not outcome.error:
            outcome.error = _tail(log_path)
        return outcome


def parse_trajectory(path: Path, *, timed_out: bool = False) -> HarnessOutcome:
    """Read a mini-swe-agent trajectory into a HarnessOutcome (returncode/seconds left for the caller).

    A run killed at the wall-clock limit still has the trajectory of its completed steps (mini saves
    after every step), so turns are counted from it; exit_kind is "timeout" regardless.
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return HarnessOutcome("timeout" if timed_out else "no_output", 0, 0, "", None, 0.0, timed_out)
    except json.JSONDecodeError as e:  # killed mid-write
        return HarnessOutcome("timeout" if timed_out else "error", 0, 0, "", f"bad trajectory: {e}", 0.0, timed_out)
    info = data.get("info", {})
    messages = data.get("messages", [])
    assistant = [m for m in messages if m.get("role") == "assistant"]
    n_tool_calls = sum(len(m.get("extra", {}).get("actions", [])) for m in assistant)
    # Unparseable replies are not assistant messages (mini stores them in a FormatError user message), so
    # count model calls from its own stats.
    n_turns = int(info.get("model_stats", {}).get("api_calls", len(assistant)))
    exit_status = info.get("exit_status", "") or ""
    final = info.get("submission") or (_content(assistant[-1]) if assistant else "")
    error = None
    if timed_out:
        kind: ExitKind = "timeout"
    elif exit_status in _EXIT_KINDS:
        kind = _EXIT_KINDS[exit_status]
    else:
        kind = "error"
        last = messages[-1] if messages else {}
        error = last.get("extra", {}).get("exception_str") or _content(last) or f"exit_status={exit_status!r}"
    return HarnessOutcome(
        exit_kind=kind,
        returncode=0,
        n_turns=n_turns,
        final_message=final,
        error=error,
        seconds=0.0,
        timed_out=timed_out,
        n_tool_calls=n_tool_calls,
        exit_status=exit_status,
        trajectory_path=path,
    )


def _content(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # multimodal content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except FileNotFoundError:
        return ""
