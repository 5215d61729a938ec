"""The safety gate in the proxy: judge every tool call of an engine reply before the harness receives it.

A harness runs whatever tool call it is handed, so a blocked call must reach it already defused, in every
dialect, streaming or not. The proxy works on the normalized chat-completions form, below the codecs:

1. The reply's tool calls are judged by `harness_rl.safety.SafetyGate` (for a streamed reply the relay holds
   tool-call deltas back until the call is complete; text streams on).
2. A blocked call is rewritten before encoding: when the request offers a shell tool, into that tool printing
   the explanation (every harness runs its own shell tool normally and goes on); otherwise into a call of a
   tool that does not exist, which every harness answers with an error result and goes on.
3. On the session's next request the proxy puts the sampled call back into the assistant message (so the prompt
   renders the tokens the model really sampled and the rollout graph still links) and makes the explanation
   that call's result, whatever the harness answered.

Text-mode harnesses (mini-swe-agent's ```bash blocks) have no tool calls: a session may name a regex whose
first group is the shell command in the reply text; a blocked command is replaced by the printing one in the
text, and the original text is put back into the next prompt.

The sampled tokens stay untouched in the capture, so training sees what the model did; the block is recorded
on the graph node (and in the run's audit log).
"""

from __future__ import annotations

import json
import re
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_rl.safety import Decision, GateContext, SafetyGate
from harness_rl.safety.audit import audit_record

#: Shell tools of the six harnesses: tool name -> the argument holding the command line.
SHELL_TOOLS = {"bash": "command", "Bash": "command", "exec_command": "cmd", "terminal": "command"}
#: The tool a blocked call is renamed to when the request offers no shell tool; no harness has it.
BLOCKED_TOOL = "safety_gate_blocked"


@dataclass(frozen=True)
class Block:
    """One blocked call: what the model sampled, what the harness got instead, and why."""

    call_id: str | None
    tool: str
    arguments: str
    replacement_tool: str
    replacement_arguments: str
    rule: str
    explanation: str

    def to_json(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "tool": self.tool, "rule": self.rule, "explanation": self.explanation}


@dataclass(frozen=True)
class TextBlock:
    """A blocked text-mode action: the reply text as sampled and as handed to the harness."""

    original: str
    replacement: str
    rule: str
    explanation: str

    def to_json(self) -> dict[str, Any]:
        return {"call_id": None, "tool": "text_action", "rule": self.rule, "explanation": self.explanation}


@dataclass
class SessionGate:
    """The gate as one session applies it; remembers its blocks to restore them in later prompts.

    Args:
        gate: the run's SafetyGate.
        context: the rollout's workspace and protected paths.
        harness: harness name, for the audit log.
        text_action: regex whose group 1 is the shell command of a text-mode reply (None: tool calls only).
        audit: called with one audit record per inspected call.
    """

    gate: SafetyGate
    context: GateContext
    harness: str | None = None
    text_action: re.Pattern[str] | None = None
    audit: Callable[[dict[str, Any]], None] | None = None
    _blocks: dict[str, Block] = field(default_factory=dict)  # by call id
    _text_blocks: dict[str, TextBlock] = field(default_factory=dict)  # by replacement text
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def review_tool_calls(self, tool_calls: list[dict[str, Any]], request_tools: Any) -> list[Block]:
        """Judges each call and puts a defused copy in the list in place of each blocked one (the call dicts
        themselves are left as they are: the capture shares them)."""
        blocks = []
        for i, call in enumerate(tool_calls):
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            name, arguments = str(function.get("name") or ""), function.get("arguments")
            arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
            decision = self._inspect(name, arguments, call_id=call.get("id"))
            if not decision.blocked:
                continue
            replacement_tool, replacement_arguments = _defused_call(decision.explanation, request_tools)
            block = Block(
                call.get("id"),
                name,
                arguments,
                replacement_tool,
                replacement_arguments,
                decision.rule or "",
                decision.explanation,
            )
            tool_calls[i] = {**call, "function": {"name": replacement_tool, "arguments": replacement_arguments}}
            with self._lock:
                if block.call_id:
                    self._blocks[block.call_id] = block
            blocks.append(block)
        return blocks

    def review_text(self, content: str) -> tuple[str, TextBlock | None]:
        """Judges the shell command of a text-mode reply; returns the text to send and the block, if any."""
        match = self.text_action.search(content) if self.text_action and content else None
        if match is None:
            return content, None
        decision = self._inspect("bash", json.dumps({"command": match.group(1)}), call_id=None)
        if not decision.blocked:
            return content, None
        printing = _printing_command(decision.explanation) + "\n"
        replacement = content[: match.start(1)] + printing + content[match.end(1) :]
        block = TextBlock(content, replacement, decision.rule or "", decision.explanation)
        with self._lock:
            self._text_blocks[replacement] = block
        return replacement, block

    def restore(self, messages: Any) -> None:
        """Puts sampled calls back into an upstream request's messages and their explanations as results."""
        if not isinstance(messages, list):
            return
        with self._lock:
            blocks, text_blocks = dict(self._blocks), dict(self._text_blocks)
        if not blocks and not text_blocks:
            return
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                continue
            if message.get("role") == "assistant":
                calls = message.get("tool_calls")
                if isinstance(calls, list) and any(isinstance(c, dict) and c.get("id") in blocks for c in calls):
                    message = messages[i] = {**message, "tool_calls": [_restored(c, blocks) for c in calls]}
                content = message.get("content")
                if isinstance(content, str) and content in text_blocks:
                    messages[i] = {**message, "content": text_blocks[content].original}
            elif message.get("role") == "tool" and message.get("tool_call_id") in blocks:
                messages[i] = {**message, "content": blocks[message["tool_call_id"]].explanation}

    def _inspect(self, tool: str, arguments: str, *, call_id: str | None) -> Decision:
        decision = self.gate.inspect(self.harness, tool, arguments, self.context)
        if self.audit is not None:
            self.audit(audit_record(self.harness, tool, arguments, decision, call_id=call_id))
        return decision


@dataclass(frozen=True)
class SafetySpec:
    """What the rollout worker tells the proxy about one rollout (the ``safety`` field of a session)."""

    workspace: str
    harness: str | None = None
    protected_paths: tuple[str, ...] = ()
    scoring_paths: tuple[str, ...] = ()
    home: str | None = None
    text_action: str | None = None


class ProxyGate:
    """The run's gate in the proxy: one SafetyGate for every session, and the run's JSONL audit log.

    Args:
        gate: the configured SafetyGate.
        audit_path: where one JSON line per inspected call is appended (None: no audit log).
    """

    def __init__(self, gate: SafetyGate, audit_path: Path | None = None) -> None:
        self.gate = gate
        self.audit_path = audit_path
        self._audit_lock = threading.Lock()
        self._audit_file = open(audit_path, "a", buffering=1) if audit_path is not None else None  # noqa: SIM115

    def for_session(self, spec: SafetySpec) -> SessionGate:
        context = GateContext(
            workspace=spec.workspace,
            protected_paths=spec.protected_paths,
            scoring_paths=spec.scoring_paths,
            home=spec.home,
        )
        text_action = re.compile(spec.text_action, re.DOTALL) if spec.text_action else None
        audit = self._write_audit if self._audit_file is not None else None
        return SessionGate(self.gate, context, harness=spec.harness, text_action=text_action, audit=audit)

    def _write_audit(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        with self._audit_lock:
            if self._audit_file is not None:
                self._audit_file.write(line)

    def close(self) -> None:
        with self._audit_lock:
            if self._audit_file is not None:
                self._audit_file.close()
                self._audit_file = None


def _restored(call: Any, blocks: dict[str, Block]) -> Any:
    if not isinstance(call, dict) or call.get("id") not in blocks:
        return call
    block = blocks[call["id"]]
    return {**call, "function": {"name": block.tool, "arguments": block.arguments}}


def _defused_call(explanation: str, request_tools: Any) -> tuple[str, str]:
    """The harmless call a blocked one becomes: the request's shell tool printing the explanation, if any."""
    for tool in request_tools if isinstance(request_tools, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if name in SHELL_TOOLS:
            return name, json.dumps({SHELL_TOOLS[name]: _printing_command(explanation)})
    return BLOCKED_TOOL, json.dumps({"explanation": explanation})


def _printing_command(explanation: str) -> str:
    return "printf '%s\\n' " + shlex.quote(explanation)


class StreamHold:
    """Holds a streamed reply's tool-call deltas back until the reply is complete, then releases them judged.

    Text deltas pass through at once; the harness receives each tool call in one piece just before the chunk
    that finishes the reply, already defused when the gate blocked it. (A harness cannot act on a partial
    call anyway, so holding costs it nothing.)
    """

    def __init__(self, gate: SessionGate, request_tools: Any) -> None:
        self.gate = gate
        self.request_tools = request_tools
        self.blocks: list[Block] = []
        self._holding = False

    def on_chunk(self, chunk: dict[str, Any], merged_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The chunks to encode for one upstream chunk.

        Args:
            chunk: the engine's chunk.
            merged_calls: the reply's tool calls merged so far, including this chunk (the capture's).
        """
        choices = chunk.get("choices") or []
        first = next((c for c in choices if c.get("index", 0) == 0), None)
        if first is None:
            return [chunk]
        delta = first.get("delta") or {}
        if delta.get("tool_calls"):
            self._holding = True
            stripped = {**first, "delta": {k: v for k, v in delta.items() if k != "tool_calls"}}
            chunk = {**chunk, "choices": [stripped if c is first else c for c in choices]}
        if not (first.get("finish_reason") and self._holding):
            return [chunk]
        calls = [dict(call) for call in merged_calls]
        self.blocks = self.gate.review_tool_calls(calls, self.request_tools)
        release_delta = {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}
        release = {
            **{k: v for k, v in chunk.items() if k not in ("choices", "usage")},
            "choices": [{"index": 0, "delta": release_delta, "finish_reason": None}],
        }
        self._holding = False
        return [release, chunk]
