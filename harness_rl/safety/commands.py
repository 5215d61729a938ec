"""One simple command (argv) to canonical actions: unwrap wrappers, follow interpreters, apply file effects.

Wrappers (``env``, ``sudo``, ``timeout``, ``xargs``, ``nohup``, ``uv run``...) are peeled off so that
``env FOO=1 timeout 5 rm -rf /`` is judged as ``rm -rf /``. Shells (``bash -c``, ``sh <<EOF``) and Python
(``python -c``, ``python - <<EOF``) are followed into their code; ``apply_patch <<EOF`` into its patch.
"""

from __future__ import annotations

import posixpath

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.file_commands import HANDLERS, Args, positionals
from harness_rl.safety.scope import Scope

SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "fish", "ash", "busybox"})
KILLERS = frozenset({"kill", "pkill", "killall", "killall5", "skill", "fuser", "pkexec"})
_OTHER_INTERPRETERS = frozenset({"node", "nodejs", "deno", "php", "Rscript", "osascript", "lua", "tclsh"})

#: Wrapper -> options of the wrapper that take a separate value (the wrapped command follows its options).
_WRAPPER_VALUE_OPTS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"}),
    "doas": frozenset({"-u", "-C"}),
    "nohup": frozenset(),
    "time": frozenset({"-f", "-o"}),
    "nice": frozenset({"-n"}),
    "ionice": frozenset({"-c", "-n", "-p"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "setsid": frozenset(),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "unbuffer": frozenset(),
    "chronic": frozenset(),
    "strace": frozenset({"-o", "-e", "-p", "-s", "-u"}),
    "ltrace": frozenset({"-o", "-e", "-p", "-s", "-u"}),
    "watch": frozenset({"-n", "-d", "--interval"}),
    "flock": frozenset({"-w", "-E", "-c"}),
    "catchsegv": frozenset(),
    "firejail": frozenset(),
}
_RUNNERS = frozenset({"uv", "poetry", "pipenv", "pdm", "hatch", "conda", "mamba", "micromamba", "pixi", "rye"})


def program_name(word: str) -> str:
    """Base name of a program as used for dispatch (``/usr/bin/python3.11`` -> ``python3.11``)."""
    return posixpath.basename(word.rstrip("/")) or word


def is_python(name: str) -> bool:
    """Whether ``name`` is a Python interpreter (python, python3, python3.11, pypy3)."""
    return name.startswith(("python", "pypy")) and name.replace(".", "").rstrip("0123456789").endswith(
        ("python", "pypy")
    )


def run_argv(argv: Args, scope: Scope, stdin: str | None = None, has_stdin: bool = False) -> None:
    """Record the actions of running ``argv`` (dynamic words are None) with the given stdin text."""
    for _ in range(16):  # wrappers can nest (sudo env timeout ...); each pass peels one
        if not argv:
            return
        head = argv[0]
        if head is None:
            scope.undecidable("a command whose name is computed at run time")
            return
        name = program_name(head)
        unwrapped = _unwrap(name, argv[1:])
        if unwrapped is None:
            break
        argv = unwrapped
    else:
        scope.undecidable("too many nested command wrappers")
        return
    args = argv[1:]
    scope.emit(Action(Kind.EXEC, argv=(name, *args), raw=head))
    if name in ("cd", "pushd"):
        _change_directory(args, scope)
    elif name in SHELLS:
        _shell(args, scope, stdin, has_stdin)
    elif is_python(name):
        _python(args, scope, stdin, has_stdin)
    elif name in ("apply_patch", "applypatch"):
        _apply_patch(args, scope, stdin)
    elif name == "eval":
        _eval(args, scope)
    elif name in KILLERS:
        scope.emit(Action(Kind.KILL, argv=(name, *args)))
    elif name == "git":
        _git(args, scope, stdin)
    elif name == "patch":
        _patch_command(args, scope, stdin)
    elif name in _OTHER_INTERPRETERS and any(a in ("-e", "-r", "--eval", "-p") for a in args):
        scope.undecidable(f"inline {name} code, which the gate does not parse")
    elif name in HANDLERS:
        HANDLERS[name](args, scope)


def _unwrap(name: str, rest: Args) -> Args | None:
    """The wrapped command when ``name`` is a wrapper, else None."""
    if name == "env":
        i = 0
        while i < len(rest):
            arg = rest[i]
            if arg in ("-u", "--unset", "-C", "--chdir", "-S"):
                i += 2
                continue
            if arg is not None and (arg.startswith("-") or ("=" in arg and not arg.startswith("="))):
                i += 1
                continue
            break
        return rest[i:] or None
    if name == "timeout":
        i = 0
        while i < len(rest) and rest[i] is not None and rest[i].startswith("-"):  # type: ignore[union-attr]
            i += 2 if rest[i] in ("-s", "-k", "--signal", "--kill-after") else 1
        return rest[i + 1 :] or None  # rest[i] is the duration
    if name == "xargs":
        return _xargs(rest)
    if name in _RUNNERS:
        if rest and rest[0] == "run":
            inner = rest[1:]
            while inner and inner[0] is not None and inner[0].startswith("-"):
                inner = inner[2:] if inner[0] in ("-n", "--name", "-p", "--prefix", "--with", "-e") else inner[1:]
            return inner or None
        return None
    if name in _WRAPPER_VALUE_OPTS:
        value_opts = _WRAPPER_VALUE_OPTS[name]
        i = 0
        while i < len(rest) and rest[i] is not None and rest[i].startswith("-"):  # type: ignore[union-attr]
            i += 2 if rest[i] in value_opts else 1
        if name == "watch" or name == "flock":
            i += 1 if name == "flock" else 0
        return rest[i:] or None
    return None


def _xargs(rest: Args) -> Args | None:
    value_opts = {"-I", "-i", "-n", "-P", "-d", "-L", "-s", "-a", "-E", "--max-args", "--max-procs", "--delimiter"}
    replace = None
    i = 0
    while i < len(rest) and rest[i] is not None and rest[i].startswith("-"):  # type: ignore[union-attr]
        arg = rest[i]
        if arg == "-I" and i + 1 < len(rest):
            replace = rest[i + 1]
        elif arg is not None and arg.startswith("-I") and len(arg) > 2:
            replace = arg[2:]
        i += 2 if arg in value_opts else 1
    inner = rest[i:] or ["echo"]
    if replace is not None:
        return [None if a is not None and replace in a else a for a in inner]
    return [*inner, None]


def _change_directory(args: Args, scope: Scope) -> None:
    paths = positionals(args)
    if not paths:
        scope.cwd = scope.home
        return
    target = paths[0]
    if target is None or target == "-":
        scope.undecidable("cd into a directory computed at run time")
        return
    from harness_rl.safety.paths import resolve

    scope.cwd = resolve(target, scope.cwd, scope.home).path


def _shell(args: Args, scope: Scope, stdin: str | None, has_stdin: bool) -> None:
    from harness_rl.safety.shell import analyze_shell

    for i, arg in enumerate(args):
        if arg is not None and arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            code = args[i + 1] if i + 1 < len(args) else None
            _nested(scope, code, analyze_shell, f"{arg} code")
            return
    scripts = positionals(args, frozenset({"-o", "+o", "-O", "+O"}))
    if scripts:
        if scripts[0] is None:
            scope.undecidable("a shell script whose path is computed at run time")
        return
    if stdin is not None:
        _nested(scope, stdin, analyze_shell, "shell code on stdin")
    elif has_stdin:
        scope.undecidable("shell code piped in from another command")


def _python(args: Args, scope: Scope, stdin: str | None, has_stdin: bool) -> None:
    from harness_rl.safety.python_code import analyze_python

    value_opts = frozenset({"-W", "-X", "-m", "-c", "--check-hash-based-pycs"})
    for i, arg in enumerate(args):
        if arg == "-c" or (arg is not None and arg.startswith("-") and not arg.startswith("--") and arg.endswith("c")):
            code = args[i + 1] if i + 1 < len(args) else None
            _nested(scope, code, analyze_python, "python -c code")
            return
        if arg == "-m" or (arg is not None and arg.startswith("-m") and len(arg) > 2):
            return  # a module run (pytest, pip, http.server): judged on argv by the rules
        if arg is not None and not arg.startswith("-") and arg not in value_opts:
            if arg != "-" and (i == 0 or args[i - 1] not in value_opts):
                return  # a script file: runs, and the rules judge argv
    if stdin is not None:
        _nested(scope, stdin, analyze_python, "python code on stdin")
    elif has_stdin:
        scope.undecidable("python code piped in from another command")


def _nested(scope: Scope, code: str | None, analyze, what: str) -> None:
    if code is None:
        scope.undecidable(f"{what} computed at run time")
        return
    if scope.enter():
        try:
            analyze(code, scope)
        finally:
            scope.leave()


def _apply_patch(args: Args, scope: Scope, stdin: str | None) -> None:
    from harness_rl.safety.patch import analyze_patch

    body = stdin if stdin is not None else (args[0] if args else None)
    if body is None:
        scope.undecidable("apply_patch with a patch computed at run time")
        return
    analyze_patch(body, scope)


def _eval(args: Args, scope: Scope) -> None:
    from harness_rl.safety.shell import analyze_shell

    if any(a is None for a in args):
        scope.undecidable("eval of a string computed at run time")
        return
    _nested(scope, " ".join(a for a in args if a is not None), analyze_shell, "eval")


def _git(args: Args, scope: Scope, stdin: str | None) -> None:
    sub_index = 0
    while sub_index < len(args) and args[sub_index] is not None and args[sub_index].startswith("-"):  # type: ignore[union-attr]
        sub_index += 2 if args[sub_index] in ("-C", "-c", "--git-dir", "--work-tree") else 1
    if sub_index >= len(args):
        return
    sub, rest = args[sub_index], args[sub_index + 1 :]
    if sub in ("show", "cat-file"):
        for arg in rest:  # `git show REV:path` prints that file as of REV
            if arg is not None and ":" in arg and not arg.startswith("-"):
                scope.file(Kind.READ, arg.split(":", 1)[1] or None)
    if sub == "rm":
        for path in positionals(rest):
            scope.file(Kind.DELETE, path)
    elif sub == "mv":
        paths = positionals(rest)
        for path in paths[:-1]:
            scope.file(Kind.DELETE, path)
        if paths:
            scope.file(Kind.WRITE, paths[-1])
    elif sub == "apply" and stdin is not None:
        from harness_rl.safety.patch import analyze_patch

        analyze_patch(stdin, scope)


def _patch_command(args: Args, scope: Scope, stdin: str | None) -> None:
    from harness_rl.safety.patch import analyze_patch

    files = positionals(args, frozenset({"-p", "-i", "-o", "-d", "-F", "-r", "-B", "-z"}))
    for path in files[:1]:
        scope.file(Kind.EDIT, path)
    if stdin is not None and not files:
        analyze_patch(stdin, scope)
    if "-i" in args:
        index = args.index("-i")
        scope.file(Kind.READ, args[index + 1] if index + 1 < len(args) else None)
