"""The safety gate: judge one tool call before the harness runs it.

API (what the proxy calls)::

    from harness_rl.safety import GateContext, SafetyConfig, SafetyGate

    gate = SafetyGate(SafetyConfig())                      # once per run (rules are built here)
    ctx = GateContext(workspace="/testbed", protected_paths=("/tests/",), own_pids=frozenset({4242}))
    decision = gate.inspect("codex", "exec_command", '{"cmd": "cat /tests/test_x.py"}', ctx)
    decision.decision      # "allow" | "block"
    decision.rule          # e.g. "verifier_access" (None when allowed)
    decision.explanation   # text the model sees as the call's result when blocked
    decision.actions       # the canonical actions the call was reduced to (for the audit log)

``inspect(harness, tool, arguments, context)``:

* ``harness``: harness or dialect name (``"pi"``, ``"claude_code"``, ...) or None. Tools are recognised by
  name and argument keys, so the hint only documents the call in the audit record.
* ``tool``: the tool name exactly as the model called it.
* ``arguments``: the JSON arguments string from the wire (Chat ``function.arguments``, Responses
  ``arguments``/``input``), or an already decoded dict (Anthropic ``input``, Google ``args``).
* ``context``: a :class:`GateContext` for the rollout.

It never raises: invalid JSON, binary bytes, huge or deeply nested input are "undecidable" and follow
``SafetyConfig.undecidable`` (``allow`` in the ``on`` config, ``block`` in ``strict``). With
``SafetyConfig.enabled = False`` every call is allowed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.config import SafetyConfig
from harness_rl.safety.paths import resolve
from harness_rl.safety.rules import RuleContext, build_rules
from harness_rl.safety.rules.undecidable import Undecidable
from harness_rl.safety.scope import Scope
from harness_rl.safety.tools import tool_actions

_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class GateContext:
    """Per-rollout facts the rules need.

    Attributes:
        workspace: Absolute path of the task's workspace inside the sandbox (what the harness runs in).
        cwd: The directory the tool runs in when it gives none (defaults to ``workspace``).
        protected_paths: Paths the task declares off limits (verifier, hidden tests), added to the config's
            defaults. A plain path protects that file or directory and everything below it; globs and the
            other pattern forms of :mod:`harness_rl.safety.config` are taken as they are.
        scoring_paths: Extra reward/log files the verifier reads (same forms).
        own_pids: Process ids of background jobs the agent itself started (``kill PID`` of these is allowed;
            job specs like ``kill %1`` and ``kill $!`` always are).
        home: What ``~`` stands for; defaults to ``SafetyConfig.home``.
    """

    workspace: str
    cwd: str | None = None
    protected_paths: tuple[str, ...] = ()
    scoring_paths: tuple[str, ...] = ()
    own_pids: frozenset[int] = frozenset()
    home: str | None = None


@dataclass(frozen=True)
class Decision:
    """The gate's verdict on one tool call."""

    decision: Literal["allow", "block"]
    rule: str | None = None
    explanation: str = ""
    actions: tuple[Action, ...] = field(default=(), repr=False, compare=False)

    @property
    def blocked(self) -> bool:
        """True when the call must not run."""
        return self.decision == "block"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used by ``python -m harness_rl.safety check`` and the audit log."""
        return {"decision": self.decision, "rule": self.rule, "explanation": self.explanation}


ALLOW = Decision("allow")


class SafetyGate:
    """Inspects tool calls with the rules switched on in a :class:`SafetyConfig`."""

    def __init__(self, config: SafetyConfig | None = None) -> None:
        self.config = config or SafetyConfig()
        self.rules = build_rules(self.config)

    def inspect(
        self, harness: str | None, tool: str, arguments: str | bytes | dict | Any, context: GateContext
    ) -> Decision:
        """Judge one tool call; see the module docstring. Never raises."""
        if not self.config.enabled:
            return ALLOW
        try:
            return self._inspect(tool, arguments, context)
        except Exception as exc:  # noqa: BLE001 - hostile input must never take the proxy down
            action = Action(Kind.UNDECIDABLE, detail=f"analysis failed ({type(exc).__name__}: {exc})"[:300])
            try:
                return self._judge([action], self._rule_context(context))
            except Exception:  # noqa: BLE001 - e.g. a context that is not a GateContext
                blocked = self.config.undecidable == "block"
                text = f"Blocked by the safety gate (undecidable): {Undecidable.explanation}" if blocked else ""
                return Decision("block" if blocked else "allow", "undecidable" if blocked else None, text, (action,))

    def _inspect(self, tool: Any, arguments: Any, context: GateContext) -> Decision:
        rctx = self._rule_context(context)
        args = _decode_arguments(arguments)
        if args is None:
            return self._judge([Action(Kind.UNDECIDABLE, detail="tool arguments that are not a JSON object")], rctx)
        workspace = rctx.workspace
        scope = Scope(
            workspace=workspace,
            home=rctx.home,
            cwd=resolve(context.cwd, workspace, rctx.home).path if context.cwd else workspace,
            max_chars=self.config.max_analysis_chars,
            variables={},
        )
        tool_actions(str(tool), args, scope)
        return self._judge(scope.actions, rctx)

    def _rule_context(self, context: GateContext) -> RuleContext:
        home = context.home or self.config.home
        workspace = resolve(context.workspace or "/", "/", home).path
        return RuleContext(
            config=self.config,
            workspace=workspace,
            home=home,
            protected=(*self.config.protected_paths, *(_as_pattern(p) for p in context.protected_paths)),
            scoring=(*self.config.scoring_paths, *(_as_pattern(p) for p in context.scoring_paths)),
            own_pids=frozenset(str(p) for p in context.own_pids),
        )

    def _judge(self, actions: list[Action], rctx: RuleContext) -> Decision:
        for rule in self.rules:
            for action in actions:
                detail = rule.check(action, rctx)
                if detail is not None:
                    text = f"Blocked by the safety gate ({rule.name}): {rule.explanation} [{detail}]"
                    return Decision("block", rule.name, text, tuple(actions))
        return Decision("allow", None, "", tuple(actions))


def _decode_arguments(arguments: Any) -> dict[str, Any] | None:
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, bytes | bytearray):
        arguments = bytes(arguments).decode("utf-8", "replace")
    if not isinstance(arguments, str):
        return None
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _as_pattern(path: str) -> str:
    """A task's plain protected path protects the file or directory and everything below it."""
    if not path or _GLOB_CHARS & set(path) or path.endswith("/"):
        return path
    return path.rstrip("/") + "/"
