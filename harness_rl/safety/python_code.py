"""Python code analysis with the stdlib ``ast``: file opens, ``os``/``shutil``/``pathlib`` file operations,
``subprocess``/``os.system`` (followed into their commands), signals, network clients and dynamic code.

Names are resolved through the module's imports (``import subprocess as sp``, ``from os import remove``) so an
alias does not hide a call. String arguments are resolved when they are constants, simple concatenations,
``os.path.join`` of constants or ``Path(...)`` expressions; anything else is a path computed at run time.
The ``hermes_tools`` helpers that hermes's ``execute_code`` exposes are mapped like the tools they call.
"""

from __future__ import annotations

import ast
import warnings

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.scope import Scope

NET_MODULES = (
    "requests", "httpx", "urllib.request", "urllib3", "aiohttp", "http.client", "ftplib", "smtplib",
    "telnetlib", "socket", "paramiko", "websocket", "websockets", "pycurl", "xmlrpc.client",
)  # fmt: skip
_OPEN = {"open", "io.open", "builtins.open", "codecs.open", "os.open"}
_DELETE = {"os.remove", "os.unlink", "os.rmdir", "os.removedirs", "shutil.rmtree"}
_MOVE = {"os.rename", "os.replace", "shutil.move", "os.renames"}
_COPY = {"shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree"}
_LIST = {"os.listdir", "os.scandir", "os.walk", "glob.glob", "glob.iglob"}
_SHELL = {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput", "commands.getoutput"}
_PROCESS = {"subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output",
            "subprocess.Popen", "os.execv", "os.execvp", "os.execve", "os.execvpe", "os.spawnv", "os.spawnvp",
            "asyncio.create_subprocess_exec", "pty.spawn"}  # fmt: skip
_KILL = {"os.kill", "os.killpg", "signal.pthread_kill"}
_DYNAMIC_CODE = {"exec", "eval", "compile", "builtins.exec", "builtins.eval"}
_DYNAMIC_IMPORT = {"__import__", "importlib.import_module"}
_PATH_READ = {"read_text", "read_bytes", "open"}
_PATH_WRITE = {"write_text", "write_bytes", "touch"}
_PATH_DELETE = {"unlink", "rmdir"}
_HERMES = {"hermes_tools.terminal", "hermes_tools.read_file", "hermes_tools.write_file", "hermes_tools.patch",
           "hermes_tools.search_files"}  # fmt: skip


def analyze_python(code: str, scope: Scope) -> None:
    """Parse ``code`` and record its actions in ``scope``; unparsable code is undecidable."""
    if scope.too_long(code, "python code"):
        return
    try:
        with warnings.catch_warnings():  # the model's code is not ours: its SyntaxWarnings must not reach the log
            warnings.simplefilter("ignore")
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        scope.undecidable("python code that does not parse")
        return
    _Visitor(scope).run(tree)


class _Visitor:
    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.aliases: dict[str, str] = {}
        self.constants: dict[str, str] = {}
        self.loop_depth = 0

    def run(self, tree: ast.AST) -> None:
        try:
            self.visit(tree)
        except RecursionError:
            self.scope.undecidable("python code nested too deeply to analyse")

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:  # `import urllib.request` binds `urllib`
                    top = alias.name.split(".")[0]
                    self.aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = self.string(node.value)
            if value is not None:
                self.constants[node.targets[0].id] = value
            else:
                self.constants.pop(node.targets[0].id, None)
        elif isinstance(node, ast.Call):
            self.call(node)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            for generator in node.generators:
                self.visit(generator.iter)
                self.bind_loop(generator.target, generator.iter)
                for condition in generator.ifs:
                    self.visit(condition)
            self.loop_depth += 1  # a comprehension is a loop too (`[os.fork() for _ in iter(int, 1)]`)
            for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
                self.visit(part)
            self.loop_depth -= 1
            return
        if isinstance(node, ast.For | ast.AsyncFor):
            self.bind_loop(node.target, node.iter)
        if isinstance(node, ast.While | ast.For | ast.AsyncFor):
            self.loop_depth += 1
            for child in ast.iter_child_nodes(node):
                self.visit(child)
            self.loop_depth -= 1
            return
        for child in ast.iter_child_nodes(node):
            self.visit(child)

    # ---- names and values --------------------------------------------------------------------------------
    def qualified(self, node: ast.expr) -> str | None:
        """Dotted name of a callee with import aliases applied (``sp.run`` -> ``subprocess.run``)."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))

    def string(self, node: ast.expr | None) -> str | None:
        """Static string value of an expression, or None."""
        if node is None:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            value = node.value
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        if isinstance(node, ast.Name):
            return self.constants.get(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Div):
            left, right = self.string(node.left), self.string(node.right)
            if left is None or right is None:
                return None
            return left + right if isinstance(node.op, ast.Add) else left.rstrip("/") + "/" + right
        if isinstance(node, ast.JoinedStr):
            parts = [
                self.string(v) if not isinstance(v, ast.FormattedValue) else self.string(v.value) for v in node.values
            ]
            return None if any(p is None for p in parts) else "".join(parts)  # type: ignore[arg-type]
        if isinstance(node, ast.Call):
            name = self.qualified(node.func)
            if name in ("os.path.join", "posixpath.join") and node.args:
                parts = [self.string(a) for a in node.args]
                return None if any(p is None for p in parts) else "/".join(p.rstrip("/") for p in parts)  # type: ignore[union-attr]
            if name and name.split(".")[-1] in ("Path", "PurePath", "PosixPath") and node.args:
                parts = [self.string(a) for a in node.args]
                return None if any(p is None for p in parts) else "/".join(p.rstrip("/") for p in parts)  # type: ignore[union-attr]
            if name and name.split(".")[-1] in ("expanduser", "abspath", "realpath", "normpath", "str") and node.args:
                return self.string(node.args[0])
        return None

    def bind_loop(self, target: ast.expr, iterable: ast.expr) -> None:
        """``for f in glob.glob('tests/*.py')``: ``f`` stands for the pattern, so ``open(f)`` is judged by it."""
        if not isinstance(target, ast.Name):
            return
        pattern = None
        if isinstance(iterable, ast.Call):
            name = self.qualified(iterable.func) or ""
            first = self.string(iterable.args[0]) if iterable.args else None
            if name in ("glob.glob", "glob.iglob") and first is not None:
                pattern = first
            elif name in ("os.listdir", "os.scandir") and first is not None:
                pattern = first.rstrip("/") + "/*"
            elif isinstance(iterable.func, ast.Attribute) and iterable.func.attr in ("glob", "rglob", "iterdir"):
                base = self.string(iterable.func.value)
                if base is not None:
                    pattern = base.rstrip("/") + "/" + (first or "*")
        if pattern is None:
            self.constants.pop(target.id, None)
        else:
            self.constants[target.id] = pattern

    def argv(self, node: ast.expr) -> list[str | None] | None:
        if isinstance(node, ast.List | ast.Tuple):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                return None
            return [self.string(e) for e in node.elts]
        return None

    def arg(self, node: ast.Call, index: int, keyword: str) -> ast.expr | None:
        if len(node.args) > index:
            return node.args[index]
        return next((k.value for k in node.keywords if k.arg == keyword), None)

    # ---- calls -------------------------------------------------------------------------------------------
    def call(self, node: ast.Call) -> None:
        name = self.qualified(node.func)
        scope = self.scope
        if name is None:
            if isinstance(node.func, ast.Call | ast.Subscript):
                scope.undecidable("call of a function chosen at run time")
            elif isinstance(node.func, ast.Attribute):
                self.path_method(node)
            return
        if name == "getattr" and len(node.args) >= 2 and self.string(node.args[1]) is None:
            scope.undecidable("getattr with an attribute named at run time")
            return
        if name in _OPEN:
            mode = self.string(self.arg(node, 1, "mode")) or "r"
            kind = Kind.READ if not set(mode) & set("wax+") else Kind.EDIT if set(mode) & set("a+") else Kind.WRITE
            if name == "os.open":
                kind = (
                    Kind.WRITE
                    if self.arg(node, 1, "flags") is not None and "O_RDONLY" not in ast.dump(node)
                    else Kind.READ
                )
            scope.file(kind, self.string(self.arg(node, 0, "file")), what="open()")
        elif name in _DELETE:
            scope.file(Kind.DELETE, self.string(self.arg(node, 0, "path")), what=name)
        elif name in _MOVE or name in _COPY:
            scope.file(Kind.DELETE if name in _MOVE else Kind.READ, self.string(self.arg(node, 0, "src")), what=name)
            scope.file(Kind.WRITE, self.string(self.arg(node, 1, "dst")), what=name)
        elif name in ("os.symlink", "os.link"):
            scope.link(self.string(self.arg(node, 1, "dst")), self.string(self.arg(node, 0, "src")))
        elif name in ("os.truncate", "os.chmod", "os.chown"):
            scope.file(Kind.EDIT, self.string(self.arg(node, 0, "path")), what=name)
        elif name in _LIST:
            target = self.arg(node, 0, "path")
            scope.file(Kind.LIST, self.string(target) if target is not None else ".", what=name)
        elif name in _SHELL or name == "hermes_tools.terminal":
            self.shell(self.string(self.arg(node, 0, "cmd" if name != "hermes_tools.terminal" else "command")))
        elif name in _PROCESS:
            self.process(node, name)
        elif name in _KILL:
            pid = self.arg(node, 0, "pid")
            pid_text = str(pid.value) if isinstance(pid, ast.Constant) else None
            scope.emit(Action(Kind.KILL, argv=("os.kill", pid_text)))
        elif name in ("os.fork", "os.forkpty") and self.loop_depth:
            scope.emit(Action(Kind.FORK_BOMB, raw="os.fork() in a loop", detail="fork in a loop"))
        elif name in _DYNAMIC_CODE:
            self.dynamic_code(node)
        elif name in _DYNAMIC_IMPORT:
            module = self.string(self.arg(node, 0, "name"))
            if module is None:
                scope.undecidable("import of a module named at run time")
            elif module.startswith(NET_MODULES):
                scope.emit(Action(Kind.NET, url=module))
        elif name in _HERMES:
            self.hermes(node, name)
        elif name.startswith(NET_MODULES) and name not in ("socket.gethostname", "socket.gethostbyname"):
            target = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "url"), None)
            if isinstance(target, ast.Tuple) and target.elts:
                target = target.elts[0]
            scope.emit(Action(Kind.NET, url=self.string(target) or name))
        elif isinstance(node.func, ast.Attribute):
            self.path_method(node)

    def path_method(self, node: ast.Call) -> None:
        func = node.func
        assert isinstance(func, ast.Attribute)
        path = self.string(func.value)
        method = func.attr
        if method in _PATH_READ and path is not None:
            self.scope.file(Kind.READ, path)
        elif method in _PATH_WRITE and path is not None:
            self.scope.file(Kind.WRITE, path, content=self.string(node.args[0]) if node.args else None)
        elif method in _PATH_DELETE and path is not None:
            self.scope.file(Kind.DELETE, path)
        elif method in ("rename", "replace") and path is not None and node.args:
            self.scope.file(Kind.DELETE, path)
            self.scope.file(Kind.WRITE, self.string(node.args[0]), what=f"Path.{method}")
        elif method == "symlink_to" and path is not None and node.args:
            self.scope.link(path, self.string(node.args[0]))

    def shell(self, command: str | None) -> None:
        from harness_rl.safety.shell import analyze_shell

        if command is None:
            self.scope.undecidable("a shell command computed at run time")
        elif self.scope.enter():
            try:
                analyze_shell(command, self.scope)
            finally:
                self.scope.leave()

    def process(self, node: ast.Call, name: str) -> None:
        from harness_rl.safety.commands import run_argv

        target = self.arg(node, 0 if not name.startswith("os.") else 1, "args")
        argv = self.argv(target) if target is not None else None
        if argv is not None:
            if self.scope.enter():
                try:
                    run_argv(argv, self.scope)
                finally:
                    self.scope.leave()
            return
        self.shell(self.string(target))

    def dynamic_code(self, node: ast.Call) -> None:
        code = self.string(node.args[0]) if node.args else None
        if code is None:
            self.scope.undecidable("exec/eval of code computed at run time")
        elif self.scope.enter():
            try:
                analyze_python(code, self.scope)
            finally:
                self.scope.leave()

    def hermes(self, node: ast.Call, name: str) -> None:
        path = self.string(self.arg(node, 0, "path"))
        if name == "hermes_tools.read_file":
            self.scope.file(Kind.READ, path, what="read_file")
        elif name == "hermes_tools.write_file":
            self.scope.file(Kind.WRITE, path, content=self.string(self.arg(node, 1, "content")), what="write_file")
        elif name == "hermes_tools.patch":
            self.scope.file(Kind.EDIT, path, content=self.string(self.arg(node, 2, "new_string")), what="patch")
        elif name == "hermes_tools.search_files":
            self.scope.file(Kind.SEARCH, self.string(self.arg(node, 1, "path")) or ".", what="search_files")
