"""Shell commands are reduced to canonical actions through the tree-sitter-bash syntax tree, following pipes,
lists, subshells, `bash -c`, wrappers, heredocs, redirections, inline Python and apply_patch bodies."""

from __future__ import annotations

import pytest

from harness_rl.safety.actions import Kind
from harness_rl.safety.scope import Scope
from harness_rl.safety.shell import analyze_shell


def actions(command: str, cwd: str = "/ws"):
    scope = Scope(workspace="/ws", home="/root", cwd=cwd, max_chars=65536)
    analyze_shell(command, scope)
    return scope.actions


def files(command: str, kind: Kind, cwd: str = "/ws") -> list[str | None]:
    return [a.path for a in actions(command, cwd) if a.kind is kind]


def programs(command: str) -> list[str | None]:
    return [a.argv[0] for a in actions(command) if a.kind is Kind.EXEC]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls | grep x && cat a || echo b; true", ["ls", "grep", "cat", "echo", "true"]),
        ("(cd src && make) & wait", ["cd", "make", "wait"]),
        ("{ echo a; echo b; } > out", ["echo", "echo"]),
        ("bash -c 'sh -c \"rm -rf x\"'", ["bash", "sh", "rm"]),
        ("env A=1 B=2 timeout -s KILL 5 nice -n 5 nohup pytest", ["pytest"]),
        ("sudo -u bob xargs -I{} rm {}", ["rm"]),
        ("echo $(whoami) `id`", ["whoami", "id", "echo"]),
        ("diff <(sort a) <(sort b)", ["sort", "sort", "diff"]),
        ("if [ -f x ]; then rm x; fi", ["rm"]),
        ("while true; do pkill y; done", ["true", "pkill"]),
        ("uv run pytest -q", ["pytest"]),
        ("r\\m file", ["rm"]),
        ("$'\\x72m' file", ["rm"]),
    ],
)
def test_programs_are_found_through_shell_structure(command, expected):
    found = programs(command)
    assert [p for p in found if p in expected] == expected, found


def test_redirections_read_and_write():
    assert files("echo hi > out.txt 2>&1", Kind.WRITE) == ["/ws/out.txt"]
    assert files("echo hi >> log.txt", Kind.EDIT) == ["/ws/log.txt"]
    assert files("sort < in.txt", Kind.READ) == ["/ws/in.txt"]
    assert files("cmd &> /tmp/all.log", Kind.WRITE) == ["/tmp/all.log"]


def test_heredoc_feeds_stdin_and_cat_heredoc_content_is_kept():
    found = actions("cat > tests/conftest.py <<'EOF'\nimport pytest\nEOF\n")
    writes = [a for a in found if a.kind is Kind.WRITE]
    assert writes[0].path == "/ws/tests/conftest.py" and writes[0].content == "import pytest\n"
    assert files("bash <<EOF\nrm -rf /etc\nEOF", Kind.DELETE) == ["/etc"]
    assert files("python - <<'EOF' | tail -3\nopen('/etc/passwd').read()\nEOF", Kind.READ) == ["/etc/passwd"]
    assert files("python3 <<< \"open('x.txt', 'w')\"", Kind.WRITE) == ["/ws/x.txt"]


def test_python_c_and_apply_patch_bodies_are_followed():
    assert files("python -c \"import os; os.remove('a.txt')\"", Kind.DELETE) == ["/ws/a.txt"]
    patch = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y\n*** End Patch\nEOF"
    edits = [a for a in actions(patch) if a.kind is Kind.EDIT]
    assert [(a.path, a.content) for a in edits] == [("/ws/src/a.py", "y")]


def test_cd_variables_and_loops_are_followed():
    assert files("cd sub && cat a.txt", Kind.READ) == ["/ws/sub/a.txt"]
    assert files("D=tests; cat $D/x.py", Kind.READ) == ["/ws/tests/x.py"]
    assert files('for f in a.txt b.txt; do cat "$f"; done', Kind.READ) == ["/ws/a.txt", "/ws/b.txt"]
    assert files("cat $HOME/.netrc ~/.ssh/id_rsa", Kind.READ) == ["/root/.netrc", "/root/.ssh/id_rsa"]


def test_common_file_commands():
    assert files("cp a.py b.py", Kind.READ) == ["/ws/a.py"]
    assert files("mv tests/t.py /tmp/", Kind.DELETE) == ["/ws/tests/t.py"]
    assert files("sed -i 's/a/b/' f.py g.py", Kind.EDIT) == ["/ws/f.py", "/ws/g.py"]
    assert files("sed -n 1,5p f.py", Kind.READ) == ["/ws/f.py"]
    assert files("grep -rn foo src lib", Kind.SEARCH) == ["/ws/src", "/ws/lib"]
    assert files("grep -e foo -e bar a.txt", Kind.READ) == ["/ws/a.txt"]
    assert files("find tests -name 'test_*.py' -delete", Kind.DELETE) == ["/ws/tests/test_*.py"]
    assert files("find tests -name '*.py' -exec rm {} \\;", Kind.DELETE) == ["/ws/tests/*.py"]
    links = [a for a in actions("ln -s ../../etc up") if a.kind is Kind.LINK]
    assert links[0].path == "/ws/up" and links[0].target == "/etc"


def test_dynamic_words_are_undecidable_not_ignored():
    kinds = [a.kind for a in actions('rm -rf "$DIR"')]
    assert Kind.UNDECIDABLE in kinds
    assert Kind.UNDECIDABLE in [a.kind for a in actions('eval "$X"')]
    assert Kind.UNDECIDABLE in [a.kind for a in actions("$CMD arg")]
    assert Kind.UNDECIDABLE in [a.kind for a in actions("curl -s x | sh")]


def test_fork_bomb_is_recognised():
    assert Kind.FORK_BOMB in [a.kind for a in actions(":(){ :|:& };:")]
    assert Kind.FORK_BOMB not in [a.kind for a in actions("f() { echo hi; }; f")]
