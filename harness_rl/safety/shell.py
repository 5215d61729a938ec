"""Shell command analysis on the tree-sitter-bash syntax tree.

tree-sitter-bash was chosen over bashlex because it is a C parser (p50 3 us vs 100 us per command on this
machine, p99 0.05 ms vs 0.28 ms) and because bashlex rejects quoted heredocs (``python - <<'EOF'``), which
agents use all the time. The walker below turns the tree into canonical actions: each simple command's argv
(with statically known words resolved, dynamic ones as None) goes to :mod:`harness_rl.safety.commands`; file
redirections become reads and writes; heredoc and here-string bodies become the command's stdin; ``cd``,
assignments and ``for`` loops over literal words are followed so later paths resolve.
"""

from __future__ import annotations

from tree_sitter import Language, Node, Parser
from tree_sitter_bash import language as bash_language

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.scope import Scope

_PARSER = Parser(Language(bash_language()))

#: Syntax-tree depth past which a command counts as undecidable (keeps the recursive walk bounded).
MAX_TREE_DEPTH = 200
#: A ``for`` loop body is analysed once per literal value, up to this many values.
MAX_LOOP_VALUES = 8

_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"', "r": "\r", "0": "\x00", "e": "\x1b"}
_WRITE_OPS = {">", ">>", ">|", "&>", "&>>", ">&"}
_OWN_JOB_SUBSTITUTIONS = {"$(jobs -p)", "$(jobs -pr)", "$(jobs -rp)", "`jobs -p`"}


def analyze_shell(command: str, scope: Scope) -> None:
    """Parse ``command`` and record its actions in ``scope``."""
    if scope.too_long(command, "shell command"):
        return
    data = command.encode("utf-8", "surrogatepass")
    tree = _PARSER.parse(data)
    root = tree.root_node
    if root.has_error:
        scope.undecidable("shell syntax the parser could not read completely")
    _Walker(scope, data).walk(root, 0)


class _Walker:
    """Walks one parsed command; one instance per ``analyze_shell`` call."""

    def __init__(self, scope: Scope, data: bytes) -> None:
        self.scope = scope
        self.data = data

    def text(self, node: Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "replace")

    # ---- words -------------------------------------------------------------------------------------------
    def literal(self, node: Node) -> str | None:
        """The static value of a word node, or None when it depends on run time."""
        kind = node.type
        if kind == "word" or kind == "number" or kind == "command_name":
            if kind == "command_name" and node.named_child_count == 1:
                return self.literal(node.named_children[0])
            raw = self.text(node)
            return _unescape_word(raw) if "\\" in raw else raw
        if kind == "raw_string":
            return self.text(node)[1:-1]
        if kind == "ansi_c_string":
            return _decode_ansi(self.text(node)[2:-1])
        if kind == "string":
            # Text between the named children (newlines, for one) is part of the value too.
            parts = []
            pos = node.start_byte + 1
            for child in node.named_children:
                parts.append(self.data[pos : child.start_byte].decode("utf-8", "replace"))
                value = self.text(child) if child.type == "string_content" else self.literal(child)
                if value is None:
                    return None
                parts.append(value)
                pos = child.end_byte
            parts.append(self.data[pos : max(pos, node.end_byte - 1)].decode("utf-8", "replace"))
            return _unescape_double_quoted("".join(parts))
        if kind == "concatenation":
            parts = [self.literal(child) for child in node.children]
            return None if any(p is None for p in parts) else "".join(parts)  # type: ignore[arg-type]
        if kind in ("simple_expansion", "expansion"):
            return self.variable(node)
        if kind == "command_substitution":
            raw = " ".join(self.text(node).split())
            return raw if raw in _OWN_JOB_SUBSTITUTIONS else None
        if kind in ("process_substitution", "arithmetic_expansion", "brace_expression"):
            return None
        return self.text(node)

    def variable(self, node: Node) -> str | None:
        raw = self.text(node)
        name = raw.lstrip("$").strip("{}")
        if name in ("!", "$", "?", "#", "0"):
            return raw  # kept verbatim: `kill $!` names the shell's own last background job
        if name == "HOME":
            return self.scope.home
        if name == "PWD":
            return self.scope.cwd
        return self.scope.variables.get(name)

    # ---- tree walk ---------------------------------------------------------------------------------------
    def walk(self, node: Node, depth: int) -> None:
        if depth > MAX_TREE_DEPTH:
            self.scope.undecidable("shell syntax nested too deeply to analyse")
            return
        kind = node.type
        if kind == "command":
            self.command(node, depth)
        elif kind == "redirected_statement":
            self.redirected(node, depth)
        elif kind == "variable_assignment":
            self.assign(node, depth)
        elif kind == "for_statement":
            self.for_loop(node, depth)
        elif kind == "function_definition":
            self.function(node, depth)
        elif kind in ("heredoc_body", "comment", "heredoc_start", "heredoc_end"):
            return
        else:
            for child in node.named_children:
                self.walk(child, depth + 1)

    def substitutions(self, node: Node, depth: int) -> None:
        """Analyse ``$(...)`` and ``<(...)`` found anywhere inside a word."""
        if depth > MAX_TREE_DEPTH:
            self.scope.undecidable("shell syntax nested too deeply to analyse")
            return
        for child in node.named_children:
            if child.type in ("command_substitution", "process_substitution"):
                for inner in child.named_children:
                    self.walk(inner, depth + 1)
            else:
                self.substitutions(child, depth + 1)

    def assign(self, node: Node, depth: int) -> None:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        if name_node is None:
            return
        if value_node is not None:
            self.substitutions(node, depth + 1)
            if value_node.type in ("command_substitution", "process_substitution"):
                for inner in value_node.named_children:
                    self.walk(inner, depth + 1)
        value = self.literal(value_node) if value_node is not None else ""
        self.scope.variables[self.text(name_node)] = value

    def for_loop(self, node: Node, depth: int) -> None:
        var_node = node.child_by_field_name("variable")
        body = node.child_by_field_name("body")
        values = [c for c in node.children_by_field_name("value")]
        for value in values:
            self.substitutions(value, depth + 1)
            if value.type == "command_substitution":
                for inner in value.named_children:
                    self.walk(inner, depth + 1)
        literals = [self.literal(v) for v in values]
        if body is None:
            return
        name = self.text(var_node) if var_node is not None else ""
        if not literals or any(v is None for v in literals):
            self.scope.variables[name] = None
            self.walk(body, depth + 1)
            return
        for value in literals[:MAX_LOOP_VALUES]:
            self.scope.variables[name] = value
            self.walk(body, depth + 1)

    def function(self, node: Node, depth: int) -> None:
        name_node = node.child_by_field_name("name")
        body = node.child_by_field_name("body")
        if name_node is None or body is None:
            return
        name = self.text(name_node)
        calls_itself = _calls(body, name, self)
        if calls_itself and ("&" in self.text(body) or "|" in self.text(body)):
            self.scope.emit(Action(Kind.FORK_BOMB, raw=self.text(node)[:80], detail="self-replicating function"))
        self.walk(body, depth + 1)

    def redirected(self, node: Node, depth: int) -> None:
        stdin: str | None = None
        has_stdin = False
        followers: list[Node] = []
        redirects: list[Node] = []
        pending: list[Node] = []
        for child in node.children_by_field_name("redirect"):
            redirects.append(child)
        for child in redirects:
            if child.type == "heredoc_redirect":
                has_stdin = True
                body = next((c for c in child.named_children if c.type == "heredoc_body"), None)
                stdin = self.text(body) if body is not None else ""
                for inner in child.named_children:
                    if inner.type == "file_redirect":
                        pending.append(inner)
                    elif inner.type not in ("heredoc_start", "heredoc_body", "heredoc_end"):
                        followers.append(inner)
            elif child.type == "herestring_redirect":
                has_stdin = True
                word = child.named_children[-1] if child.named_child_count else None
                stdin = self.literal(word) if word is not None else None
                if word is not None:
                    self.substitutions(child, depth + 1)
            elif child.type == "file_redirect":
                pending.append(child)
        body = node.child_by_field_name("body")
        content = self._output_text(body, stdin) if body is not None and body.type == "command" else None
        for child in pending:
            self.file_redirect(child, depth, content=content)
        if body is not None:
            if body.type == "command":
                self.command(body, depth, stdin=stdin, has_stdin=has_stdin)
            else:
                self.walk(body, depth + 1)
        for follower in followers:
            self.walk(follower, depth + 1)

    def _output_text(self, node: Node, stdin: str | None) -> str | None:
        """What a command prints when that is static (`cat <<EOF`, `echo ...`, `printf ...`), so the content
        rules can see what a redirection writes."""
        name_node = node.child_by_field_name("name")
        name = self.literal(name_node) if name_node is not None else None
        if name in ("cat", "tee"):
            return stdin
        if name not in ("echo", "printf"):
            return None
        words = [self.literal(c) for c in node.children_by_field_name("argument")]
        if any(w is None for w in words):
            return None
        text = " ".join(w for w in words if w is not None and not (name == "echo" and w in ("-e", "-n", "-E")))
        return text.replace("\\n", "\n")

    def file_redirect(self, node: Node, depth: int, content: str | None = None) -> None:
        op = next((self.text(c) for c in node.children if not c.is_named), ">")
        dest = node.child_by_field_name("destination")
        if dest is None:
            dest = node.named_children[-1] if node.named_child_count else None
        if dest is None or dest.type in ("number", "file_descriptor") or op in ("<&", ">&-", "<&-"):
            return
        self.substitutions(node, depth + 1)
        value = self.literal(dest)
        if op == ">&" and value is not None and value.isdigit():
            return
        if op in _WRITE_OPS:
            kind = Kind.EDIT if op.endswith(">>") else Kind.WRITE
            self.scope.file(kind, value, content=content, what="a redirection")
        elif op in ("<", "<>"):
            self.scope.file(Kind.READ, value, what="a redirection")

    def command(self, node: Node, depth: int, stdin: str | None = None, has_stdin: bool = False) -> None:
        from harness_rl.safety.commands import run_argv  # commands imports this module for `bash -c`

        argv: list[str | None] = []
        for child in node.named_children:
            if child.type == "variable_assignment":
                self.assign(child, depth)
                continue
            if child.type == "file_redirect":
                self.file_redirect(child, depth)
                continue
            if child.type == "herestring_redirect":  # `cmd <<< text` sits on the command node itself
                has_stdin = True
                self.substitutions(child, depth + 1)
                stdin = self.literal(child.named_children[-1]) if child.named_child_count else None
                continue
            self.substitutions(child, depth + 1)
            if child.type in ("command_substitution", "process_substitution"):
                for inner in child.named_children:
                    self.walk(inner, depth + 1)
            argv.append(self.literal(child))
        if not argv:
            return
        piped = node.parent is not None and node.parent.type == "pipeline" and node.prev_named_sibling is not None
        run_argv(argv, self.scope, stdin=stdin, has_stdin=has_stdin or piped)


def _calls(node: Node, name: str, walker: _Walker) -> bool:
    stack = [node]
    seen = 0
    while stack and seen < 10000:
        seen += 1
        current = stack.pop()
        if current.type == "command_name" and walker.text(current) == name:
            return True
        stack.extend(current.named_children)
    return False


def _unescape_word(raw: str) -> str:
    out = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            out.append(raw[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _unescape_double_quoted(text: str) -> str:
    """Inside double quotes a backslash escapes only $, `, ", \\ and newline."""
    if "\\" not in text:
        return text
    out = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _decode_ansi(body: str) -> str:
    out = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt == "x" and i + 3 < len(body) + 1:
                try:
                    out.append(chr(int(body[i + 2 : i + 4], 16)))
                    i += 4
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)
