"""Hostile tool calls (random text, invalid JSON, binary bytes, huge or deeply nested input) never raise out of
SafetyGate.inspect, and what cannot be analysed follows the configured default (allow in `on`, block in
`strict`)."""

from __future__ import annotations

import json
import shlex

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_rl.safety import Decision, GateContext, SafetyConfig, SafetyGate
from harness_rl.safety.presets import preset

CTX = GateContext(workspace="/testbed")
ON = SafetyGate(preset("on"))
STRICT = SafetyGate(preset("strict"))
TOOLS = ["bash", "Bash", "exec_command", "terminal", "read", "Write", "edit", "patch", "apply_patch", "execute_code",
         "write_stdin", "webfetch", "unknown"]  # fmt: skip
SHELL_PIECES = st.sampled_from(
    list("abc -'\"$(){}[]<>|&;\\\n\t*?~=#!%`/.0") + ["<<EOF\n", "\nEOF\n", "bash -c ", "python -c "]
)
shell_text = st.lists(SHELL_PIECES, max_size=120).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
settings_ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(decision: Decision) -> None:
    assert isinstance(decision, Decision) and decision.decision in ("allow", "block")
    # inspect() has a last-resort catch-all; the analysers themselves must not need it
    assert not any(a.detail.startswith("analysis failed") for a in decision.actions), decision.actions


@settings_
@given(tool=st.sampled_from(TOOLS), command=shell_text | st.text(max_size=200))
def test_random_shell_text_never_raises(tool, command):
    for gate in (ON, STRICT):
        check(gate.inspect("pi", tool, {"command": command, "cmd": command, "code": command, "patch": command}, CTX))


@settings_
@given(tool=st.sampled_from(TOOLS), arguments=json_values)
def test_arbitrary_json_arguments_never_raise(tool, arguments):
    check(ON.inspect("hermes", tool, json.dumps(arguments), CTX))
    check(ON.inspect("hermes", tool, arguments, CTX))


@settings_
@given(raw=st.binary(max_size=300), tool=st.sampled_from(TOOLS))
def test_binary_bytes_never_raise(raw, tool):
    check(ON.inspect("codex", tool, raw, CTX))
    check(ON.inspect("codex", tool, {"cmd": raw.decode("latin-1")}, CTX))


def test_invalid_json_follows_the_configured_default():
    assert ON.inspect("pi", "bash", '{"command": "rm -rf /', CTX).decision == "allow"
    blocked = STRICT.inspect("pi", "bash", '{"command": "rm -rf /', CTX)
    assert blocked.blocked and blocked.rule == "undecidable"


def test_huge_and_deeply_nested_input():
    huge = "echo " + "a" * 2_000_000
    assert STRICT.inspect("pi", "bash", {"command": huge}, CTX).rule == "undecidable"
    nested_shell = "ls"
    for _ in range(12):
        nested_shell = "bash -c " + shlex.quote(nested_shell)
    nested_subshells = "(" * 5000 + "ls" + ")" * 5000
    nested_substitutions = "echo " + "$(" * 3000 + "ls" + ")" * 3000
    nested_python = 'python -c "' + "(" * 5000 + "1" + ")" * 5000 + '"'
    deep_json = "[" * 100000 + "]" * 100000
    for command in (nested_shell, nested_subshells, nested_substitutions, nested_python):
        check(ON.inspect("pi", "bash", {"command": command}, CTX))
        assert STRICT.inspect("pi", "bash", {"command": command}, CTX).blocked
    check(ON.inspect("pi", "bash", deep_json, CTX))
    check(ON.inspect("pi", "bash", {"command": "rm -rf /" + "\x00" * 10}, CTX))


def test_gate_off_allows_everything_without_looking():
    gate = SafetyGate(SafetyConfig(enabled=False))
    assert gate.inspect("pi", "bash", {"command": "rm -rf /"}, CTX).decision == "allow"
