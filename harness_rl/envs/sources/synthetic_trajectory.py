"""Agent trajectories from three formats, read into one internal form for the synthetic task generators.

Formats:
    chat: an OpenAI chat message list (a JSON list, or an object with ``messages``), either with structured
        calls (assistant ``tool_calls`` answered by ``role: "tool"`` messages) or in mini-swe-agent's text
        style (a ```bash block per assistant turn, the observation in the next ``user`` message).
    atif: Harbor's Agent Trajectory Interchange Format (``schema_version`` "ATIF-v1.x"; ``steps`` with
        ``source`` user/agent/system, ``message``, ``tool_calls`` with ``tool_call_id``/``function_name``/
        ``arguments``, and ``observation.results`` tied to calls by ``source_call_id``).
    rollout: a rollout folder of this project holding ``trace.jsonl`` (``harness_rl.proxy.export``). A trace
        keeps token ids only, so the conversation is recovered by decoding the longest training sequence:
        with the scripted fake engine's toy tokenizer, or with a Hugging Face tokenizer for ChatML models.

The starting workspace is not part of any of these formats; this project keeps it beside the trajectory:
``workspace`` (path -> text) in the chat object, ``extra.harness_rl.workspace`` in ATIF, and ``synthetic.json``
(``{"instruction", "workspace"}``) in a rollout folder. Without it a trajectory yields no task.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_rl.proxy.export import read_trace_jsonl
from harness_rl.proxy.toy_chat_template import END, ROLE_IDS, START

#: A call runs a shell command when its tool's name has one of these words and an argument below holds it.
SHELL_TOOL_WORDS = ("bash", "shell", "exec", "terminal", "run_command", "execute_command", "sh")
SHELL_ARGUMENT_KEYS = ("command", "cmd", "script")
#: Argument keys of a file-writing tool (path, content).
WRITE_PATH_KEYS = ("path", "file_path", "filename")
WRITE_CONTENT_KEYS = ("content", "file_text", "text")

_BASH_BLOCK = re.compile(r"```(?:bash|sh|shell)[ \t]*\n(.*?)```", re.DOTALL)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_OUTPUT_TAG = re.compile(r"<output>\n?(.*?)</output>", re.DOTALL)
_EXIT_HEADER = re.compile(r"\A\s*(?:exit code|exit status|process exited with code)[:\s]+(-?\d+)\s*\n?", re.I)
_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_TOOL_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)
_CHATML_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|\Z)", re.DOTALL)
#: mini-swe-agent's way to end a run; not an action on the workspace.
SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")


@dataclass(frozen=True)
class Action:
    """One tool call of a trajectory and what it returned.

    Attributes:
        tool: The tool's name ("bash" for a text-mode ```bash block).
        arguments: The call's arguments as recorded.
        command: The shell command it ran, when it ran one (then it can be replayed).
        write: (path, content) when the call wrote a file instead.
        output: The tool's output text (wrappers such as ``<returncode>`` removed); None when not recorded.
        exit_code: The command's exit status when the output says it.
        thought: The assistant text of the turn that made the call.
    """

    tool: str
    arguments: Mapping[str, Any]
    command: str | None
    write: tuple[str, str] | None
    output: str | None
    exit_code: int | None
    thought: str

    @property
    def replayable(self) -> bool:
        """Whether replaying the call on a workspace is possible (a shell command or a file write)."""
        return self.command is not None or self.write is not None


@dataclass(frozen=True)
class Trajectory:
    """One agent run: the task it was given, its tool calls in order, and its starting workspace.

    Attributes:
        id: Stable, filesystem-safe id (the file or folder name).
        task: The task text the agent was given.
        actions: The tool calls in order.
        workspace: The starting workspace (relative path -> text) when known.
        origin: "chat", "atif" or "rollout".
    """

    id: str
    task: str
    actions: tuple[Action, ...]
    workspace: Mapping[str, str] | None
    origin: str


def make_action(
    tool: str, arguments: Mapping[str, Any], output: Any, thought: str, exit_code: int | None = None
) -> Action:
    """An Action from a call's name, arguments and raw output, recognising shell and file-write tools; any
    other tool (an editor's view or replace, a search) is kept but not replayable."""
    command = write = None
    path = next((arguments[k] for k in WRITE_PATH_KEYS if isinstance(arguments.get(k), str)), None)
    name = tool.lower()
    if path is None and (name == "sh" or any(word in name for word in SHELL_TOOL_WORDS if word != "sh")):
        for key in SHELL_ARGUMENT_KEYS:
            value = arguments.get(key)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                value = _argv_to_command(value)
            if isinstance(value, str) and value.strip():
                command = value
                break
    content = next((arguments[k] for k in WRITE_CONTENT_KEYS if isinstance(arguments.get(k), str)), None)
    # A write tool, or an editor's "create" (its other commands edit in ways not recorded here).
    if path and content is not None and arguments.get("command", "create") == "create":
        write = (path, content)
    text, code = parse_observation(output)
    return Action(tool, dict(arguments), command, write, text, exit_code if exit_code is not None else code, thought)


def _argv_to_command(argv: list[str]) -> str:
    # codex-style ["bash", "-lc", "cmd"] runs cmd; any other argv is quoted back into one command line.
    if len(argv) == 3 and argv[0] in ("bash", "sh") and argv[1] in ("-c", "-lc"):
        return argv[2]
    return shlex.join(argv)


def parse_observation(output: Any) -> tuple[str | None, int | None]:
    """A tool output's text and exit status: mini-swe-agent's ``<returncode>``/``<output>`` tags, a JSON
    object with ``output``/``exit_code`` (or ``stdout``/``returncode``), or an "Exit code: N" header."""
    if output is None:
        return None, None
    if isinstance(output, list):  # content parts
        output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
    if isinstance(output, dict):
        obj = output
    else:
        text = str(output)
        obj = None
        if text.lstrip().startswith("{"):
            try:
                parsed = json.loads(text)
                obj = parsed if isinstance(parsed, dict) else None
            except json.JSONDecodeError:
                obj = None
        if obj is None:
            if m := _RETURNCODE.search(text):
                body = _OUTPUT_TAG.search(text)
                return (body.group(1) if body else text[m.end() :].strip()), int(m.group(1))
            if m := _EXIT_HEADER.match(text):
                return text[m.end() :], int(m.group(1))
            return text, None
    body = next((obj[k] for k in ("output", "stdout", "content") if isinstance(obj.get(k), str)), None)
    code = next((obj[k] for k in ("exit_code", "returncode", "exitCode") if isinstance(obj.get(k), int)), None)
    return (body if body is not None else json.dumps(obj)), code


# --- chat-format messages ------------------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def read_chat_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[Action]]:
    """The task (first user message) and the actions of an OpenAI chat message list.

    Structured calls are answered by ``tool`` messages with the same ``tool_call_id``; Hermes-style
    ``<tool_call>`` tags in assistant text count as calls too (a decoded trace). Without any structured call,
    the first ```bash block of each assistant turn is the action and the next user message its observation,
    and the task is what follows the last "Task:" of the first user message when it has one (mini's template).
    """
    task = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    results: dict[str, Any] = {}
    for m in messages:
        if m.get("role") == "tool" and m.get("tool_call_id"):
            results[str(m["tool_call_id"])] = m.get("content")
    actions: list[Action] = []
    structured = any(
        m.get("tool_calls") or _HERMES_CALL.search(_text(m.get("content")))
        for m in messages
        if m.get("role") == "assistant"
    )
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        text = _text(m.get("content"))
        if structured:
            calls = [_openai_call(tc) for tc in m.get("tool_calls") or []]
            calls += [_hermes_call(raw) for raw in _HERMES_CALL.findall(text)]
            thought = _HERMES_CALL.sub("", text).strip()
            answers = _following(messages, i, ("tool",))
            for n, (call_id, name, args) in enumerate(calls):
                output = results.get(call_id) if call_id else (answers[n] if n < len(answers) else None)
                actions.append(make_action(name, args, output, thought))
        elif block := _BASH_BLOCK.search(text):
            command = block.group(1).strip()
            answers = _following(messages, i, ("user", "tool"))
            thought = text[: block.start()].strip()
            actions.append(make_action("bash", {"command": command}, answers[0] if answers else None, thought))
    return (task if structured else _mini_task(task)), [a for a in actions if not _is_submit(a)]


def _is_submit(action: Action) -> bool:
    """mini-swe-agent's submit command: how the run ends, not an action on the workspace."""
    return action.command is not None and any(marker in action.command for marker in SUBMIT_MARKERS)


def _following(messages: Sequence[Mapping[str, Any]], index: int, roles: tuple[str, ...]) -> list[Any]:
    """Contents of the messages of ``roles`` right after message ``index``, up to the next assistant turn."""
    out = []
    for m in messages[index + 1 :]:
        if m.get("role") == "assistant":
            break
        if m.get("role") in roles:
            content = _text(m.get("content"))
            inner = _TOOL_RESPONSE.findall(content)
            out.extend(inner or [content])
    return out


def _json_object(raw: Any) -> dict[str, Any]:
    """Call arguments as a dict: a dict as is, a JSON object string parsed, anything else under "input"."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw or "{}")
        except json.JSONDecodeError:
            return {"input": raw}
        return parsed if isinstance(parsed, dict) else {"input": parsed}
    return {"input": raw}


def _openai_call(tc: Mapping[str, Any]) -> tuple[str | None, str, dict[str, Any]]:
    fn = tc.get("function") or {}
    return tc.get("id"), str(fn.get("name", "")), _json_object(fn.get("arguments"))


def _hermes_call(raw: str) -> tuple[None, str, dict[str, Any]]:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError:
        return None, "", {}
    return None, str(obj.get("name", "")), _json_object(obj.get("arguments"))


# --- ATIF -------------------------------------------------------------------------------------------------------


def read_atif(doc: Mapping[str, Any]) -> tuple[str, list[Action]]:
    """The task (first user step's message) and the actions of an ATIF trajectory document."""
    task = ""
    actions: list[Action] = []
    for step in doc.get("steps") or []:
        source = step.get("source")
        if source == "user" and not task:
            task = _text(step.get("message"))
        if source != "agent":
            continue
        results = {}
        for result in (step.get("observation") or {}).get("results") or []:
            extra = result.get("extra") or {}
            results[str(result.get("source_call_id"))] = (result.get("content"), extra.get("exit_code"))
        for call in step.get("tool_calls") or []:
            args = _json_object(call.get("arguments"))
            output, code = results.get(str(call.get("tool_call_id")), (None, None))
            actions.append(
                make_action(str(call.get("function_name", "")), args, output, _text(step.get("message")), code)
            )
    return task, [a for a in actions if not _is_submit(a)]


# --- rollout traces ------------------------------------------------------------------------------------------------

Decoder = Callable[[Sequence[int]], list[dict[str, Any]]]


def decode_fake_engine(ids: Sequence[int]) -> list[dict[str, Any]]:
    """Messages from token ids of the scripted fake engine's toy chat template (START role text END)."""
    roles = {v: k for k, v in ROLE_IDS.items()}
    messages: list[dict[str, Any]] = []
    i = 0
    while i < len(ids):
        if ids[i] == START and i + 1 < len(ids):
            role = roles.get(ids[i + 1], "unknown")
            j = i + 2
            while j < len(ids) and ids[j] != END:
                j += 1
            messages.append({"role": role, "content": "".join(chr(t) for t in ids[i + 2 : j])})
            i = j + 1
        else:
            i += 1
    return messages


def chatml_decoder(tokenizer: Any) -> Decoder:
    """A decoder for ChatML models (Qwen and kin) through a Hugging Face tokenizer; tool results arrive as
    ``<tool_response>`` blocks inside user turns and are turned back into ``tool`` messages."""

    def decode(ids: Sequence[int]) -> list[dict[str, Any]]:
        text = tokenizer.decode(list(ids), skip_special_tokens=False)
        messages = []
        for role, content in _CHATML_TURN.findall(text):
            responses = _TOOL_RESPONSE.findall(content) if role == "user" else []
            if responses:
                messages.extend({"role": "tool", "content": r} for r in responses)
            else:
                messages.append({"role": role, "content": content.strip()})
        return messages

    return decode


def read_rollout(folder: Path, decoder: Decoder | None = None) -> tuple[str, list[Action]]:
    """The task and actions of a rollout folder's ``trace.jsonl``, decoded from its longest sequence."""
    trace = read_trace_jsonl(Path(folder) / "trace.jsonl")
    sequences = trace.get("sequences") or []
    if not sequences:
        raise ValueError(f"{folder}: the trace has no training sequence")
    ids = max(sequences, key=lambda s: len(s["input_ids"]))["input_ids"]
    if decoder is None:
        if START not in ids:
            raise ValueError(f"{folder}: not a fake-engine trace; pass a tokenizer's decoder (chatml_decoder)")
        decoder = decode_fake_engine
    return read_chat_messages(decoder(ids))


# --- loading --------------------------------------------------------------------------------------------------------


def load_trajectory(path: Path, decoder: Decoder | None = None) -> Trajectory:
    """Reads one trajectory: a rollout folder, an ATIF file or a chat-format file (told apart by content)."""
    path = Path(path)
    tid = re.sub(r"[^a-z0-9]+", "-", path.name.removesuffix(".json").lower()).strip("-")
    if path.is_dir():
        side = path / "synthetic.json"
        meta = json.loads(side.read_text()) if side.exists() else {}
        task, actions = read_rollout(path, decoder)
        return Trajectory(tid, meta.get("instruction") or task, tuple(actions), meta.get("workspace"), "rollout")
    doc = json.loads(path.read_text())
    if isinstance(doc, dict) and str(doc.get("schema_version", "")).startswith("ATIF"):
        task, actions = read_atif(doc)
        workspace = ((doc.get("extra") or {}).get("harness_rl") or {}).get("workspace")
        return Trajectory(tid, task, tuple(actions), workspace, "atif")
    messages = doc.get("messages") if isinstance(doc, dict) else doc
    if not isinstance(messages, list):
        raise ValueError(f"{path}: neither an ATIF document nor a chat message list")
    task, actions = read_chat_messages(messages)
    workspace = doc.get("workspace") if isinstance(doc, dict) else None
    return Trajectory(tid, doc.get("task", task) if isinstance(doc, dict) else task, tuple(actions), workspace, "chat")


def _mini_task(message: str) -> str:
    # mini-swe-agent's instance template ends with "Task: {{task}}" after worked examples; keep the real task.
    return message.rsplit("Task:", 1)[-1].strip() if "Task:" in message else message.strip()


def load_corpus(folder: Path, decoder: Decoder | None = None) -> list[Trajectory]:
    """All trajectories in ``folder`` (``*.json`` files and rollout sub-folders), sorted by id."""
    folder = Path(folder)
    entries = [p for p in folder.iterdir() if p.suffix == ".json" or (p.is_dir() and (p / "trace.jsonl").exists())]
    trajectories = [load_trajectory(p, decoder) for p in entries]
    ids = [t.id for t in trajectories]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate trajectory ids in {folder}")
    return sorted(trajectories, key=lambda t: t.id)
