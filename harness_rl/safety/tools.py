"""Harness tools to canonical actions, for the six harnesses (tool schemas: shared/reference/captures/*/tools.json).

=================  ==========================================================================================
harness            tools (arguments that matter)
=================  ==========================================================================================
pi                 bash(command), read(path), edit(path, edits[{oldText,newText}]), write(path, content),
                   grep/find/ls(path)
opencode           bash(command, workdir), read/write(filePath[, content]), edit(filePath, newString),
                   grep/glob(path), webfetch(url), task(prompt), patch(patchText)
claude-code        Bash(command, run_in_background), Read/Write/Edit/MultiEdit(file_path...), NotebookEdit,
                   Glob/Grep(path), WebFetch(url), WebSearch(query), Agent/Task(prompt), KillShell/KillBash
codex              exec_command(cmd, workdir), write_stdin(chars), apply_patch(input), view_image(path),
                   shell(command: list), web_search
hermes             terminal(command, workdir), read_file/write_file(path[, content]), patch(mode, path,
                   new_string | patch), search_files(path), execute_code(code), process(action),
                   delegate_task(goal), vision_analyze(image_url), web_search/web_extract, browser_*
mini-swe-agent     bash(command)
=================  ==========================================================================================

Tools are recognised by lower-cased name and argument keys, so the harness hint is only a tie-breaker; an unknown
tool with no recognisable arguments yields no actions (todo lists, questions, memory, skills).
"""

from __future__ import annotations

from typing import Any

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.commands import run_argv
from harness_rl.safety.paths import resolve
from harness_rl.safety.scope import Scope

_SHELL_TOOLS = {"bash", "exec_command", "terminal", "shell", "run_shell_command", "local_shell", "execute_command"}
_READ_TOOLS = {"read", "read_file", "view_image", "notebookread", "view"}
_WRITE_TOOLS = {"write", "write_file", "create_file"}
_EDIT_TOOLS = {"edit", "multiedit", "str_replace_editor", "notebookedit", "str_replace_based_edit_tool"}
_PATCH_TOOLS = {"apply_patch", "patch"}
_SEARCH_TOOLS = {"grep", "search_files"}
_LIST_TOOLS = {"glob", "ls", "find", "list_directory", "list_files"}
_NET_TOOLS = {"webfetch", "web_fetch", "websearch", "web_search", "web_extract", "fetch"}
_SPAWN_TOOLS = {"agent", "task", "delegate_task", "cronjob", "workflow"}
_OWN_JOB_TOOLS = {"killshell", "killbash", "process", "write_stdin_kill"}
_PATH_KEYS = ("file_path", "filePath", "path", "notebook_path", "filename", "file")


def tool_actions(tool: str, args: dict[str, Any], scope: Scope) -> None:
    """Record the canonical actions of one tool call in ``scope``."""
    name = tool.rsplit(".", 1)[-1].rsplit("__", 1)[-1].lower()  # `functions.bash`, `mcp__server__tool`
    workdir = args.get("workdir") or args.get("cwd")
    if isinstance(workdir, str) and workdir:
        scope.cwd = resolve(workdir, scope.cwd, scope.home).path
    if name in _SHELL_TOOLS or name == "write_stdin":
        _shell_tool(name, args, scope)
    elif name in _PATCH_TOOLS and (
        _text(args, "patch", "patchText", "input", "patch_text") or args.get("mode") == "patch"
    ):
        _patch_tool(args, scope)
    elif name in _READ_TOOLS:
        scope.file(Kind.READ, _path(args), what=tool)
    elif name in _WRITE_TOOLS:
        scope.file(Kind.WRITE, _path(args), content=_text(args, "content", "contents", "text"), what=tool)
    elif name in _EDIT_TOOLS or name == "patch":
        scope.file(Kind.EDIT, _path(args), content=_edit_text(args), what=tool)
    elif name in _SEARCH_TOOLS:
        scope.file(Kind.SEARCH, _text(args, "path", "directory") or ".", what=tool)
    elif name in _LIST_TOOLS:
        scope.file(Kind.LIST, _text(args, "path", "directory") or ".", what=tool)
    elif name in _NET_TOOLS or name.startswith("browser_"):
        scope.emit(Action(Kind.NET, url=_text(args, "url", "query", "urls") or name))
    elif name == "vision_analyze":
        url = _text(args, "image_url") or ""
        if url.startswith(("http://", "https://")):
            scope.emit(Action(Kind.NET, url=url))
        elif url and not url.startswith("data:"):
            scope.file(Kind.READ, url, what=tool)
    elif name in _SPAWN_TOOLS:
        scope.emit(Action(Kind.SPAWN, content=_text(args, "prompt", "goal", "script", "description")))
    elif name == "execute_code":
        from harness_rl.safety.python_code import analyze_python

        code = _text(args, "code")
        if code is None:
            scope.undecidable("execute_code without code")
        else:
            analyze_python(code, scope)
    elif name in _OWN_JOB_TOOLS:
        return  # these tools only reach the harness's own background shells
    else:
        path = _path(args)
        if path is not None:
            scope.file(Kind.READ, path, what=tool)


def _shell_tool(name: str, args: dict[str, Any], scope: Scope) -> None:
    from harness_rl.safety.shell import analyze_shell

    if name == "write_stdin":
        chars = args.get("chars")
        if isinstance(chars, str) and chars.strip():
            analyze_shell(chars, scope)  # text typed into the model's own running shell session
        return
    command = args.get("command", args.get("cmd"))
    if isinstance(command, list):
        argv = [a if isinstance(a, str) else None for a in command]
        if len(argv) >= 3 and argv[0] in ("bash", "sh", "zsh") and argv[1] in ("-c", "-lc") and argv[2] is not None:
            analyze_shell(argv[2], scope)
        else:
            run_argv(argv, scope)
    elif isinstance(command, str):
        analyze_shell(command, scope)
    else:
        scope.undecidable(f"{name} call without a command string")


def _patch_tool(args: dict[str, Any], scope: Scope) -> None:
    from harness_rl.safety.patch import analyze_patch

    body = _text(args, "patch", "patchText", "input", "patch_text")
    if body is None:
        scope.undecidable("patch tool without a patch body")
        return
    analyze_patch(body, scope)


def _path(args: dict[str, Any]) -> str | None:
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _text(args: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = args.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return value[0]
    return None


def _edit_text(args: dict[str, Any]) -> str | None:
    texts: list[str] = []
    for key in ("new_string", "newString", "new_str", "new_source", "content", "file_text"):
        value = args.get(key)
        if isinstance(value, str):
            texts.append(value)
    edits = args.get("edits")
    if isinstance(edits, list):
        for edit in edits:
            if isinstance(edit, dict):
                for key in ("newText", "new_string", "newString"):
                    value = edit.get(key)
                    if isinstance(value, str):
                        texts.append(value)
    return "\n".join(texts) if texts else None
