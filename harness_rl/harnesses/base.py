"""The Harness protocol (one implementation per coding-agent harness) and the outcome of one run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

#: How a harness run ended, normalized across harnesses.
#: submitted: the agent declared it was done; limits_exceeded: its own step/cost/time limit stopped it;
#: format_error: it stopped after repeated unparseable model replies; timeout: our wall-clock limit killed it;
#: error: it stopped on an exception (e.g. the endpoint is down); no_output: it exited without a trajectory.
ExitKind = Literal["submitted", "limits_exceeded", "format_error", "timeout", "error", "no_output"]


@dataclass
class HarnessOutcome:
    """What one headless harness run produced (the verifier's score is computed separately).

    Attributes:
        exit_kind: Normalized end state, see ``ExitKind``.
        returncode: The harness process's exit status (negative: killed by that signal).
        n_turns: Model calls the harness made (including replies it could not parse).
        final_message: The last assistant text (or the submission), for logs.
        error: Why it failed, when it did (exception text or log tail).
        seconds: Wall-clock seconds of the run.
        timed_out: True when our wall-clock limit killed it.
        n_tool_calls: Commands the harness executed (what the efficiency bonus counts).
        exit_status: The harness's own exit status string, unnormalized (e.g. "LimitsExceeded").
        trajectory_path: The harness's trajectory file, when it wrote one.
        isolation: The sandbox isolation the run had ("bwrap" or "none").
        started_at: Wall time (``time.time()``) the harness process was launched, for the rollout's phase timing
            (rollout/phases.py); None when the harness does not say (the rollout then takes its end minus
            ``seconds``).
    """

    exit_kind: ExitKind
    returncode: int
    n_turns: int
    final_message: str
    error: str | None
    seconds: float
    timed_out: bool
    n_tool_calls: int = 0
    exit_status: str = ""
    trajectory_path: Path | None = None
    isolation: str = ""
    started_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict for the rollout record."""
        d = asdict(self)
        d["trajectory_path"] = str(self.trajectory_path) if self.trajectory_path else None
        return d


class HarnessNotInstalledError(RuntimeError):
    """The harness binary is missing; the message names the exact install command."""


@runtime_checkable
class Harness(Protocol):
    """A coding-agent harness run headless against an OpenAI-compatible (or other dialect) base URL."""

    #: Registry name, also the adapter name prefix and the install target (e.g. "mini_swe_agent").
    name: str
    #: Wire dialect it speaks to the proxy (e.g. "openai_chat").
    dialect: str
    #: True when the harness itself stops after ``step_limit`` model calls (claude ``--max-turns``, hermes
    #: ``--max-turns``, pi's extension, mini's ``agent.step_limit``). False when its limit is soft or absent
    #: (opencode, codex): then the rollout sets the proxy session's request budget to ``step_limit``, and
    #: the proxy answers every call past it with a final plain-text reply that ends the run.
    step_limit_is_hard: bool
    #: ``(tool name, command argument)`` of the harness's shell tool, e.g. ``("Bash", "command")``: what a
    #: scripted upstream calls to make the harness run one command (``python -m harness_rl.harnesses check``).
    shell_tool: tuple[str, str]
    #: For harnesses that act through reply text instead of tool calls (mini-swe-agent's text mode): a regex
    #: whose group 1 is the shell command the harness will run, so the safety gate can judge it. None (or
    #: absent) for tool-calling harnesses.
    text_action_regex: str | None

    def install(self) -> Path:
        """Install the pinned harness into the project-local tools folder; returns its bin path.

        Called by ``python -m harness_rl.harnesses install`` and by test fixtures, never during a rollout.
        Idempotent: a second call with the same pinned version does nothing.
        """
        ...

    def is_installed(self) -> bool:
        """Whether the pinned version is installed; called by the launcher before any rollout starts."""
        ...

    def version(self) -> str:
        """The installed version string; called when a run is recorded (raises if not installed)."""
        ...

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
        """Run one rollout headless; called by the rollout worker once per (task, sample).

        Args:
            task_workspace: The laid-out task folder; the harness's working directory.
            instruction: The task text given to the agent.
            base_url: OpenAI-style base URL of the capture proxy (ending in ``/v1``).
            api_key: The rollout's session key (the proxy identifies the rollout by it).
            step_limit: Maximum model calls the harness may make.
            timeout_s: Wall-clock limit; at it the whole process tree is killed.
            rollout_dir: The rollout's private folder (home, tmp, logs, trajectory).

        Raises:
            HarnessNotInstalledError: The harness is not installed.
        """
        ...
