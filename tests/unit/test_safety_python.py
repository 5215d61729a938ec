"""Inline Python (python -c, heredocs, hermes execute_code) and patch bodies are reduced to canonical actions."""

from __future__ import annotations

from harness_rl.safety.actions import Kind
from harness_rl.safety.patch import analyze_patch
from harness_rl.safety.python_code import analyze_python
from harness_rl.safety.scope import Scope


def run(code: str, analyzer=analyze_python):
    scope = Scope(workspace="/ws", home="/root", cwd="/ws", max_chars=65536)
    analyzer(code, scope)
    return scope.actions


def of(code: str, kind: Kind, analyzer=analyze_python):
    return [a.path for a in run(code, analyzer) if a.kind is kind]


def test_open_modes_and_path_expressions():
    assert of("open('a.txt')", Kind.READ) == ["/ws/a.txt"]
    assert of("open('a.txt', 'w')", Kind.WRITE) == ["/ws/a.txt"]
    assert of("open(file='a.txt', mode='a')", Kind.EDIT) == ["/ws/a.txt"]
    assert of("import os\nopen(os.path.join('tests', 'x.py')).read()", Kind.READ) == ["/ws/tests/x.py"]
    assert of("p = 'tests/' + 'y.py'\nopen(p)", Kind.READ) == ["/ws/tests/y.py"]
    assert of(
        "from pathlib import Path\nPath('out') / 'r.txt'\n(Path('out') / 'r.txt').write_text('1')", Kind.WRITE
    ) == ["/ws/out/r.txt"]


def test_aliases_do_not_hide_calls():
    assert of("import shutil as sh\nsh.rmtree('/etc')", Kind.DELETE) == ["/etc"]
    assert of("from os import remove as rm\nrm('x')", Kind.DELETE) == ["/ws/x"]
    kills = [a for a in run("import os as o\no.kill(1, 9)") if a.kind is Kind.KILL]
    assert kills[0].argv == ("os.kill", "1")


def test_subprocess_and_system_are_followed_into_commands():
    execs = [a.argv[0] for a in run("import subprocess as sp\nsp.run(['pkill', '-f', 'x'])") if a.kind is Kind.EXEC]
    assert execs == ["pkill"]
    assert of("import os\nos.system('rm -rf /etc')", Kind.DELETE) == ["/etc"]
    assert of("import subprocess\nsubprocess.check_output('cat /etc/shadow', shell=True)", Kind.READ) == ["/etc/shadow"]


def test_network_clients_and_dynamic_code():
    nets = [a.url for a in run("import requests\nrequests.get('https://x.org')") if a.kind is Kind.NET]
    assert nets == ["https://x.org"]
    nets = [
        a.url for a in run("from urllib.request import urlopen\nurlopen('http://127.0.0.1:8000')") if a.kind is Kind.NET
    ]
    assert nets == ["http://127.0.0.1:8000"]
    assert of("exec(\"open('t.py', 'w')\")", Kind.WRITE) == ["/ws/t.py"]
    assert Kind.UNDECIDABLE in [a.kind for a in run("exec(code)")]
    assert Kind.UNDECIDABLE in [a.kind for a in run("open(name)")]
    assert Kind.UNDECIDABLE in [a.kind for a in run("def broken(:")]
    assert Kind.FORK_BOMB in [a.kind for a in run("import os\nwhile True:\n    os.fork()")]


def test_hermes_tools_in_execute_code():
    code = "from hermes_tools import terminal, read_file\nterminal('rm x')\nread_file('/tests/t.py')"
    assert of(code, Kind.DELETE) == ["/ws/x"]
    assert of(code, Kind.READ) == ["/tests/t.py"]


def test_codex_patch_format():
    patch = (
        "*** Begin Patch\n*** Add File: new.py\n+print(1)\n*** Update File: old.py\n*** Move to: moved.py\n@@\n-a\n+b\n"
        "*** Delete File: gone.py\n*** End Patch\n"
    )
    found = [(a.kind, a.path, a.content) for a in run(patch, analyze_patch)]
    assert found == [
        (Kind.WRITE, "/ws/new.py", "print(1)"),
        (Kind.DELETE, "/ws/old.py", None),
        (Kind.WRITE, "/ws/moved.py", "b"),
        (Kind.DELETE, "/ws/gone.py", ""),
    ]


def test_unified_diff():
    diff = "--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n--- a/tests/t.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    found = [(a.kind, a.path) for a in run(diff, analyze_patch)]
    assert found == [(Kind.EDIT, "/ws/src/x.py"), (Kind.DELETE, "/ws/tests/t.py")]
