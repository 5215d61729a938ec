"""No production module imports the test doubles: every ``import`` in harness_rl outside ``harness_rl/testkit/``
(module level, inside functions, under ``TYPE_CHECKING``, relative or absolute) is read with ``ast``, and one
that reaches ``harness_rl.testkit`` fails the test. ``harnesses/check.py`` (the ``harnesses check`` command,
which runs a harness against the scripted proxy) is the one allowed exception."""

from __future__ import annotations

import ast
from pathlib import Path

import harness_rl

PACKAGE_ROOT = Path(harness_rl.__file__).resolve().parent
TESTKIT = "harness_rl.testkit"
#: Modules allowed to import the testkit, relative to the package root.
ALLOWED = {Path("harnesses/check.py")}


def _module_name(path: Path, root: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the tree, wherever it sits; ``from X import y`` yields
    both ``X`` and ``X.y`` (y may be a submodule, e.g. ``from harness_rl import testkit``)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def find_testkit_imports(root: Path, allowed: set[Path] = ALLOWED) -> list[str]:
    """``path:line: name`` for each import of the testkit by a module of the package at ``root`` outside its
    ``testkit/`` folder and ``allowed``."""
    offenders = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] == "testkit" or relative in allowed:
            continue
        module = _module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, name in _imported_names(tree, module, path.name == "__init__.py"):
            if name == TESTKIT or name.startswith(TESTKIT + "."):
                offenders.append(f"{relative}:{line}: {name}")
    return offenders


def test_no_production_module_imports_the_testkit():
    offenders = find_testkit_imports(PACKAGE_ROOT)
    assert not offenders, (
        "production modules import the test doubles (harness_rl/testkit); move what they need out of the "
        "testkit (as harness_rl/proxy/toy_chat_template.py was) or the module out of the package:\n"
        + "\n".join(offenders)
    )


def test_the_walk_finds_every_kind_of_import(tmp_path):
    """The check itself can fail: a planted package with each form of testkit import is caught, line by line."""
    root = tmp_path / "harness_rl"
    (root / "testkit").mkdir(parents=True)
    (root / "proxy").mkdir()
    (root / "harnesses").mkdir()
    for package in (root, root / "testkit", root / "proxy", root / "harnesses"):
        (package / "__init__.py").write_text("")
    (root / "testkit" / "fake.py").write_text("from harness_rl.testkit import other\n")  # inside: fine
    (root / "harnesses" / "check.py").write_text("import harness_rl.testkit.fake\n")  # allowed
    (root / "proxy" / "clean.py").write_text("import harness_rl.proxy\nfrom harness_rl.proxy import clean\n")
    (root / "proxy" / "bad.py").write_text(
        "import harness_rl.testkit.fake\n"
        "from harness_rl import testkit\n"
        "def later():\n"
        "    from harness_rl.testkit.fake import Engine\n"
        "    from ..testkit import fake\n"
        "if False:\n"
        "    from .. import testkit as kit\n"
    )

    found = find_testkit_imports(root)

    bad = Path("proxy/bad.py")
    assert found == [
        f"{bad}:1: harness_rl.testkit.fake",
        f"{bad}:2: harness_rl.testkit",
        f"{bad}:4: harness_rl.testkit.fake",
        f"{bad}:4: harness_rl.testkit.fake.Engine",
        f"{bad}:5: harness_rl.testkit",
        f"{bad}:5: harness_rl.testkit.fake",
        f"{bad}:7: harness_rl.testkit",
    ]
