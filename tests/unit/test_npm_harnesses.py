"""pi and opencode adapters without running them: registry, install stamps, config templates, command lines,
environments, and how their JSON event streams map onto the normalized outcome (fast: no binary is run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_rl.harnesses import ADAPTERS, HARNESSES, Harness
from harness_rl.harnesses.common import fill_template, read_jsonl
from harness_rl.harnesses.install import (
    NPM_TOOLS,
    STAMP_NAME,
    install_npm_into,
    npm_binary,
    read_npm_stamp,
    write_stamp,
)
from harness_rl.harnesses.opencode import OpenCode
from harness_rl.harnesses.opencode import parse_events as parse_opencode
from harness_rl.harnesses.pi import STEP_LIMIT_EXTENSION, Pi
from harness_rl.harnesses.pi import parse_events as parse_pi
from harness_rl.proxy.relay import BUDGET_MESSAGE


def test_pi_and_opencode_are_registered_lazily_under_their_names():
    for name, cls in (("pi", Pi), ("opencode", OpenCode)):
        assert name in HARNESSES and HARNESSES[name] is cls and cls.name == name
        assert isinstance(cls(), Harness) and cls.dialect == "openai_chat"
    assert set(HARNESSES) <= set(ADAPTERS)
    assert Pi.step_limit_is_hard and not OpenCode.step_limit_is_hard
    with pytest.raises(KeyError):
        HARNESSES["no_such_harness"]


def _fake_npm_install(tools: Path, name: str, version: str) -> None:
    spec = NPM_TOOLS[name]
    pkg = tools / "npm" / "node_modules" / spec.package
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps({"name": spec.package, "version": version}))
    npm_binary(spec, tools).parent.mkdir(parents=True, exist_ok=True)
    npm_binary(spec, tools).touch()


def test_npm_stamp_needs_the_pinned_version_on_disk(tmp_path):
    spec = NPM_TOOLS["pi"]
    assert read_npm_stamp(spec, tmp_path) is None
    _fake_npm_install(tmp_path, "pi", spec.version)
    assert read_npm_stamp(spec, tmp_path) is None  # no stamp yet: an interrupted install
    write_stamp(tmp_path / "npm" / ".stamps" / "pi.json", {"requirement": spec.requirement})
    assert read_npm_stamp(spec, tmp_path)["requirement"] == "@mariozechner/pi-coding-agent@0.73.1"
    assert Pi(tools=tmp_path).is_installed() and Pi(tools=tmp_path).version() == "0.73.1"
    # Another install into the shared prefix replaced the package: no longer installed at the pin.
    (tmp_path / "npm" / "node_modules" / spec.package / "package.json").write_text('{"version": "0.70.0"}')
    assert read_npm_stamp(spec, tmp_path) is None and not Pi(tools=tmp_path).is_installed()


def test_install_npm_into_is_a_no_op_when_the_stamp_matches(tmp_path, monkeypatch):
    prefix = tmp_path / "home" / ".config" / "opencode"
    pkg = prefix / "node_modules" / "@opencode-ai" / "plugin"
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text('{"version": "1.18.33"}')
    write_stamp(prefix / STAMP_NAME, {"requirements": ["@opencode-ai/plugin@1.18.33"]})

    def no_npm(*a, **k):
        raise AssertionError("npm must not run")

    monkeypatch.setattr("harness_rl.harnesses.install.npm_install", no_npm)
    assert install_npm_into(prefix, ["@opencode-ai/plugin@1.18.33"], tools=tmp_path) == prefix
    with pytest.raises(AssertionError, match="npm must not run"):  # another pin: it would reinstall
        install_npm_into(prefix, ["@opencode-ai/plugin@1.18.34"], tools=tmp_path)


def test_fill_template_keeps_types_and_names_missing_values():
    doc = {"${k}": {"n": "${n}", "url": "${u}/v1", "list": ["${b}"]}}
    assert fill_template(doc, {"k": "m", "n": 4096, "u": "http://h", "b": False}) == {
        "m": {"n": 4096, "url": "http://h/v1", "list": [False]}
    }
    with pytest.raises(KeyError, match="missing"):
        fill_template({"x": "${missing}"}, {})


def test_read_jsonl_skips_text_and_truncated_lines(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"type": "a"}\nWarning: something\n[1]\n{"type": "b"}\n{"type": "tru')
    assert read_jsonl(path) == [{"type": "a"}, {"type": "b"}]
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_pi_config_command_and_env(tmp_path):
    pi = Pi(tools=tmp_path, model_name="m1", context_length=8192, max_output_tokens=512)
    pi.write_config(tmp_path / "agent", base_url="http://127.0.0.1:5/v1")
    models = json.loads((tmp_path / "agent" / "models.json").read_text())["providers"]["harness-rl"]
    assert models["baseUrl"] == "http://127.0.0.1:5/v1" and models["apiKey"] == "HARNESS_RL_API_KEY"
    assert models["models"] == [{"id": "m1", "contextWindow": 8192, "maxTokens": 512}]
    settings = json.loads((tmp_path / "agent" / "settings.json").read_text())
    assert settings["compaction"]["enabled"] is False and settings["retry"]["maxRetries"] == 1
    argv = pi.command("Do it.")
    assert argv[0] == str(tmp_path / "npm" / "node_modules" / ".bin" / "pi") and argv[-1] == "Do it."
    assert argv[argv.index("--mode") + 1] == "json" and "-p" in argv and "--no-session" in argv
    assert argv[argv.index("-e") + 1] == str(STEP_LIMIT_EXTENSION) and STEP_LIMIT_EXTENSION.exists()
    assert argv[argv.index("--provider") + 1] == "harness-rl" and argv[argv.index("--model") + 1] == "m1"
    env = pi.env(agent_dir=tmp_path / "agent", api_key="key-1", step_limit=7)
    assert env["PI_OFFLINE"] == "1" and env["HARNESS_RL_API_KEY"] == "key-1" and env["HARNESS_RL_MAX_TURNS"] == "7"
    assert env["PI_CODING_AGENT_DIR"] == str(tmp_path / "agent") and "HOME" not in env  # the sandbox sets HOME


def _pi_assistant(stop: str, text: str = "", error: str | None = None, tool: bool = False) -> dict:
    content = [{"type": "text", "text": text}] if text else []
    if tool:
        content.append({"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}})
    message = {"role": "assistant", "content": content, "stopReason": stop}
    if error:
        message["errorMessage"] = error
    return {"type": "message_end", "message": message}


PI_SUCCESS = [
    {"type": "session"},
    {"type": "message_end", "message": {"role": "user", "content": [{"type": "text", "text": "Do it."}]}},
    _pi_assistant("toolUse", tool=True),
    {"type": "tool_execution_end", "toolName": "bash", "isError": False},
    _pi_assistant("stop", text="Done."),
    {"type": "agent_end"},
]


@pytest.mark.parametrize(
    ("events", "rc", "stderr", "timed_out", "kind", "turns"),
    [
        (PI_SUCCESS, 0, "", False, "submitted", 2),
        (PI_SUCCESS[:4], 1, "harness-rl: step limit reached after 1 model calls\n", False, "limits_exceeded", 1),
        ([_pi_assistant("stop", text=BUDGET_MESSAGE)], 0, "", False, "limits_exceeded", 1),
        ([_pi_assistant("error", error="Connection error.")] * 2, 0, "", False, "error", 2),
        (PI_SUCCESS[:3], -9, "", True, "timeout", 1),
        ([{"type": "session"}], 0, "", False, "no_output", 0),
        ([], 1, "Error: bad flag", False, "error", 0),
    ],
)
def test_pi_events_map_onto_exit_kinds(events, rc, stderr, timed_out, kind, turns):
    outcome = parse_pi(events, returncode=rc, timed_out=timed_out, stderr=stderr)
    assert outcome.exit_kind == kind and outcome.n_turns == turns and outcome.returncode == rc
    if kind == "submitted":
        assert outcome.final_message == "Done." and outcome.n_tool_calls == 1 and outcome.error is None
    if kind == "error":
        assert outcome.error in ("Connection error.", "Error: bad flag")


def test_opencode_config_home_and_env(tmp_path):
    template = tmp_path / "opencode-home" / ".config" / "opencode"
    (template / "node_modules").mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        (template / name).write_text("{}")
    oc = OpenCode(tools=tmp_path, model_name="m1", context_length=8192, max_output_tokens=512)
    assert oc.config_template == template
    oc.write_config(tmp_path / "opencode.json", base_url="http://127.0.0.1:5/v1", step_limit=9)
    config = json.loads((tmp_path / "opencode.json").read_text())
    provider = config["provider"]["harness-rl"]
    assert provider["options"] == {"baseURL": "http://127.0.0.1:5/v1", "apiKey": "{env:HARNESS_RL_API_KEY}"}
    assert provider["models"] == {"m1": {"name": "m1", "limit": {"context": 8192, "output": 512}}}
    assert config["model"] == config["small_model"] == "harness-rl/m1"
    assert config["agent"]["build"]["steps"] == 9 and config["permission"]["webfetch"] == "deny"
    oc.seed_home(tmp_path / "home")
    oc.seed_home(tmp_path / "home")  # idempotent
    seeded = tmp_path / "home" / ".config" / "opencode"
    assert (seeded / "node_modules").is_symlink() and (seeded / "node_modules").resolve() == template / "node_modules"
    assert (seeded / "package.json").read_text() == "{}" and not (seeded / "package.json").is_symlink()
    argv = oc.command("Do it.")
    assert argv[1:] == ["run", "--title", "task", "--format", "json", "Do it."]
    env = oc.env(config_path=tmp_path / "opencode.json", api_key="key-1")
    assert env["OPENCODE_CONFIG"] == str(tmp_path / "opencode.json") and env["HARNESS_RL_API_KEY"] == "key-1"
    for flag in ("MODELS_FETCH", "AUTOUPDATE", "DEFAULT_PLUGINS", "LSP_DOWNLOAD", "SHARE", "AUTOCOMPACT"):
        assert env[f"OPENCODE_DISABLE_{flag}"] == "1"


def _oc(kind: str, **part) -> dict:
    return {"type": kind, "part": part}


OC_SUCCESS = [
    _oc("step_start"),
    _oc("tool_use", tool="bash", state={"status": "completed"}),
    _oc("step_finish", reason="tool-calls"),
    _oc("step_start"),
    _oc("text", text="Done."),
    _oc("step_finish", reason="stop"),
]
OC_BUDGET = [*OC_SUCCESS[:3], _oc("step_start"), _oc("text", text=BUDGET_MESSAGE), _oc("step_finish", reason="stop")]
OC_DOWN = [{"type": "error", "error": {"name": "APIError", "data": {"message": "Cannot connect to API"}}}]


@pytest.mark.parametrize(
    ("events", "rc", "timed_out", "kind", "turns"),
    [
        (OC_SUCCESS, 0, False, "submitted", 2),
        (OC_BUDGET, 0, False, "limits_exceeded", 2),
        (OC_DOWN, 1, False, "error", 0),
        (OC_SUCCESS[:2], -9, True, "timeout", 1),
        ([], 0, False, "no_output", 0),
        ([], 1, False, "error", 0),
    ],
)
def test_opencode_events_map_onto_exit_kinds(events, rc, timed_out, kind, turns):
    outcome = parse_opencode(events, returncode=rc, timed_out=timed_out, stderr="")
    assert outcome.exit_kind == kind and outcome.n_turns == turns
    if kind == "submitted":
        assert outcome.final_message == "Done." and outcome.n_tool_calls == 1 and outcome.exit_status == "stop"
    if events is OC_DOWN:
        assert outcome.error == "APIError: Cannot connect to API" and outcome.exit_status == "APIError"
