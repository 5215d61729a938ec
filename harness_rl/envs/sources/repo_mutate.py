"""Mutation operators for the repository source: small source edits that break one function.

Each mutation is a text edit located by the ``ast`` positions of the node it changes, so the rest of the file keeps
its exact bytes (comments, formatting): the oracle is then the original file, and nothing but the broken spot
differs. ``ast.unparse`` of the whole module would reformat every line and drop comments, which both reveals the
edit to a diff against the upstream release and makes the workspace unlike the real project.

Operators (``OPERATORS``):
    body_deleted: the function's body (its docstring kept) becomes ``raise NotImplementedError``.
    compare_flipped: one comparison operator changes (``<`` <-> ``<=``, ``==`` <-> ``!=``, ``in`` <-> ``not in``...).
    boolop_swapped: ``and`` <-> ``or``.
    constant_off_by_one: an integer literal n becomes n + 1 (n < 2) or n - 1.
    arith_swapped: ``+`` <-> ``-``.
    not_removed: a ``not`` is dropped.
    default_changed: a parameter default changes (True <-> False, n -> n + 1).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

OPERATORS = (
    "body_deleted",
    "compare_flipped",
    "boolop_swapped",
    "constant_off_by_one",
    "arith_swapped",
    "not_removed",
    "default_changed",
)

_COMPARE_SWAP = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
}
# The operator token alone in the gap between two operands (which may hold brackets, spaces and line breaks).
_TOKEN_RE = {
    "<": r"(?<![<>=!])<(?![<=])",
    "<=": r"<=",
    ">": r"(?<![<>=!-])>(?![>=])",
    ">=": r"(?<!>)>=",
    "==": r"==",
    "!=": r"!=",
    "is": r"\bis\b(?!\s+not\b)",
    "is not": r"\bis\s+not\b",
    "in": r"(?<!not )\bin\b",
    "not in": r"\bnot\s+in\b",
    "and": r"\band\b",
    "or": r"\bor\b",
    "+": r"(?<![+=])\+(?![+=])",
    "-": r"(?<![-=])-(?![-=>])",
}
#: Smallest function (lines from ``def`` to its end) worth breaking.
MIN_FUNCTION_LINES = 3


@dataclass(frozen=True)
class Function:
    """A function or method that may be broken.

    Attributes:
        path: Module path under the project root (POSIX).
        qualname: ``name`` or ``Class.name``.
        lineno: Line of its ``def``.
        n_lines: Lines from ``def`` to its end.
        docstring: Its docstring ("" when none).
    """

    path: str
    qualname: str
    lineno: int
    n_lines: int
    docstring: str


@dataclass(frozen=True)
class Mutation:
    """One broken variant of a module.

    Attributes:
        function: The function it breaks.
        operator: One of ``OPERATORS``.
        site: Index of the edited node among the operator's sites in the function (stable for a given file).
        lineno: Line of the edit in the original file.
        source: The whole mutated module text.
    """

    function: Function
    operator: str
    site: int
    lineno: int
    source: str

    @property
    def key(self) -> str:
        """Stable id within a project: ``path:qualname:operator:site``."""
        return f"{self.function.path}:{self.function.qualname}:{self.operator}:{self.site}"


def functions(path: str, text: str) -> list[tuple[Function, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Public top-level functions and public methods of top-level classes of a module, in file order."""
    tree = ast.parse(text)
    out = []

    def add(node: ast.AST, prefix: str) -> None:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name.startswith("_"):
            return
        n_lines = node.end_lineno - node.lineno + 1
        if n_lines >= MIN_FUNCTION_LINES:
            fn = Function(path, prefix + node.name, node.lineno, n_lines, ast.get_docstring(node) or "")
            out.append((fn, node))

    for node in tree.body:
        add(node, "")
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                add(item, node.name + ".")
    return out


def _offset(lines: list[bytes], lineno: int, col: int) -> int:
    """Byte offset in the file of (1-based line, byte column), as ast reports positions."""
    return sum(len(line) for line in lines[: lineno - 1]) + col


def _body_nodes(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    return body


def _walk_body(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """Nodes of the function's body in a fixed order, skipping f-strings (their inner positions are unreliable)
    and nested function definitions (they are not this function's code)."""
    stack = list(reversed(_body_nodes(node)))
    while stack:
        n = stack.pop()
        if isinstance(n, ast.JoinedStr | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        yield n
        stack.extend(reversed(list(ast.iter_child_nodes(n))))


def _gap_edit(data: bytes, lines, left: ast.AST, right: ast.AST, old: str, new: str):
    """The edit replacing the operator token ``old`` that stands between two operands by ``new``."""
    start = _offset(lines, left.end_lineno, left.end_col_offset)
    end = _offset(lines, right.lineno, right.col_offset)
    gap = data[start:end].decode("utf-8", "replace")
    found = list(re.finditer(_TOKEN_RE[old], gap))
    if len(found) != 1 or "#" in gap:
        return None
    m = found[0]
    return start + len(gap[: m.start()].encode()), start + len(gap[: m.end()].encode()), new.encode()


def _sites(operator: str, node, data: bytes, lines: list[bytes]) -> list[tuple[int, int, int, bytes]]:
    """Edits (line, start byte, end byte, new bytes) the operator can make in the function ``node``."""
    edits = []
    if operator == "body_deleted":
        body = _body_nodes(node)
        if not body or body[-1].end_lineno - body[0].lineno < 1:
            return []
        first_line = lines[body[0].lineno - 1]
        indent = first_line[: body[0].col_offset]
        if indent.strip():  # the body starts on the def's line
            return []
        start = _offset(lines, body[0].lineno, 0)
        end = _offset(lines, body[-1].end_lineno + 1, 0) if body[-1].end_lineno < len(lines) else len(data)
        return [(body[0].lineno, start, end, indent + b"raise NotImplementedError\n")]
    if operator == "default_changed":
        for d in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            if isinstance(d, ast.Constant) and type(d.value) in (bool, int):
                new = repr(not d.value) if isinstance(d.value, bool) else repr(d.value + 1)
                s, e = _offset(lines, d.lineno, d.col_offset), _offset(lines, d.end_lineno, d.end_col_offset)
                edits.append((d.lineno, s, e, new.encode()))
        return edits
    for n in _walk_body(node):
        edit = None
        if operator == "compare_flipped" and isinstance(n, ast.Compare) and len(n.ops) == 1:
            swap = _COMPARE_SWAP.get(type(n.ops[0]))
            edit = swap and _gap_edit(data, lines, n.left, n.comparators[0], *swap)
        elif operator == "boolop_swapped" and isinstance(n, ast.BoolOp) and len(n.values) == 2:
            old, new = ("and", "or") if isinstance(n.op, ast.And) else ("or", "and")
            edit = _gap_edit(data, lines, n.values[0], n.values[1], old, new)
        elif operator == "arith_swapped" and isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add | ast.Sub):
            old, new = ("+", "-") if isinstance(n.op, ast.Add) else ("-", "+")
            edit = _gap_edit(data, lines, n.left, n.right, old, new)
        elif operator == "constant_off_by_one" and isinstance(n, ast.Constant) and type(n.value) is int:
            new = n.value + 1 if n.value < 2 else n.value - 1
            s, e = _offset(lines, n.lineno, n.col_offset), _offset(lines, n.end_lineno, n.end_col_offset)
            edit = (s, e, str(new).encode())
        elif operator == "not_removed" and isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            s = _offset(lines, n.lineno, n.col_offset)
            m = re.match(rb"not\s*", data[s : _offset(lines, n.operand.lineno, n.operand.col_offset)])
            edit = m and (s, s + m.end(), b"" if m.end() > 3 else b" ")
        if edit:
            edits.append((n.lineno, *edit))
    return edits


def mutations(path: str, text: str) -> Iterator[Mutation]:
    """Every candidate mutation of every public function of a module, unchecked (see ``is_valid``).

    Checking is left to the caller because parsing each mutant of a large module (thousands of candidates in
    more-itertools' more.py) costs far more than the few that get picked.
    """
    data = text.encode()
    lines = data.splitlines(keepends=True)
    for fn, node in functions(path, text):
        for operator in OPERATORS:
            for site, (lineno, start, end, new) in enumerate(_sites(operator, node, data, lines)):
                yield Mutation(fn, operator, site, lineno, (data[:start] + new + data[end:]).decode())


def is_valid(mutation: Mutation, original: str) -> bool:
    """Whether the mutant parses and means something else than ``original`` (its module's text)."""
    try:
        return ast.dump(ast.parse(mutation.source)) != ast.dump(ast.parse(original))
    except SyntaxError:
        return False
