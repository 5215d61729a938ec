"""The claude-code, codex and hermes adapters render their per-rollout config and command line from the run's
parameters, and map each harness's own output (claude stream-json, codex exec --json events, hermes's
state.db + agent.log) onto the normalized outcome (fast: no binary is run)."""

from __future__ import annotations

import json
import sqlite3
import tomllib
from pathlib import Path

import yaml

from harness_rl.harnesses.claude_code import ClaudeCode, parse_result
from harness_rl.harnesses.codex import Codex, parse_events
from harness_rl.harnesses.hermes import MIN_CONTEXT_LENGTH, Hermes, parse_hermes_home

URL = "http://127.0.0.1:4321/v1"


def _jsonl(path: Path, events: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + tail)
    return path


# --- claude-code -------------------------------------------------------------------------------------------


def test_claude_command_line_and_env(tmp_path):
    claude = ClaudeCode(tools=tmp_path, context_length=8192, max_output_tokens=1024, model_name="m1")
    argv = claude.command("-rf everything", step_limit=7)
    assert argv[0] == str(tmp_path / "npm" / "node_modules" / ".bin" / "claude")
    assert argv[argv.index("--max-turns") + 1] == "7"
    assert argv[argv.index("--output-format") + 1] == "stream-json" and "--verbose" in argv
    assert argv[-2:] == ["--", "-rf everything"]  # an instruction is never parsed as options
    env = claude.env(base_url=URL + "/", api_key="sess-1")
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:4321"  # claude appends /v1/messages itself
    assert env["ANTHROPIC_API_KEY"] == "sess-1" and env["ANTHROPIC_MODEL"] == "m1"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "1024" and env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "8192"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["DISABLE_COMPACT"] == "1"
    assert all(isinstance(v, str) for v in env.values())


def _assistant(msg_id: str, *blocks: dict) -> dict:
    return {"type": "assistant", "message": {"id": msg_id, "content": list(blocks)}}


def test_claude_success_counts_calls_and_tools(tmp_path):
    events = [
        {"type": "system", "subtype": "init"},
        _assistant("m1", {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}),
        _assistant("m1", {"type": "tool_use", "name": "Read", "input": {}}),  # same call, second block
        {"type": "user", "message": {"content": []}},
        _assistant("m2", {"type": "text", "text": "done"}),
        {"type": "result", "subtype": "success", "is_error": False, "terminal_reason": "completed",
         "num_turns": 2, "result": "done"},
    ]  # fmt: skip
    out = parse_result(_jsonl(tmp_path / "o", events), returncode=0, max_turns=10)
    assert (out.exit_kind, out.n_turns, out.n_tool_calls, out.final_message) == ("submitted", 2, 2, "done")


def test_claude_limit_error_and_missing_result(tmp_path):
    limit = {"type": "result", "subtype": "error_max_turns", "is_error": True, "terminal_reason": "max_turns",
             "num_turns": 3, "result": ""}  # fmt: skip
    out = parse_result(_jsonl(tmp_path / "a", [limit]), returncode=1, max_turns=2)
    assert out.exit_kind == "limits_exceeded" and out.n_turns == 2  # num_turns counts the refused turn
    down = {"type": "result", "subtype": "success", "is_error": True, "terminal_reason": "api_error",
            "num_turns": 1, "result": "API Error: Connection refused"}  # fmt: skip
    out = parse_result(_jsonl(tmp_path / "b", [down]), returncode=1)
    assert out.exit_kind == "error" and "Connection refused" in out.error
    assert parse_result(_jsonl(tmp_path / "c", [], tail='{"type": "assi'), returncode=0).exit_kind == "no_output"
    assert parse_result(tmp_path / "missing", returncode=1).exit_kind == "error"
    assert parse_result(tmp_path / "missing", returncode=-15, timed_out=True).exit_kind == "timeout"


# --- codex -------------------------------------------------------------------------------------------------


def test_codex_config_is_valid_toml_with_the_run_values(tmp_path):
    text = Codex(tools=tmp_path, model_name='we"ird', context_length=8192, max_retries=2).config(base_url=URL)
    config = tomllib.loads(text)
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == URL and provider["wire_api"] == "responses"
    assert provider["env_key"] == "HARNESS_RL_API_KEY" and provider["request_max_retries"] == 2
    assert config["model"] == 'we"ird' and config["model_context_window"] == 8192
    assert config["analytics"]["enabled"] is False and config["features"]["plugins"] is False
    assert config["web_search"] == "disabled" and config["check_for_update_on_startup"] is False


def test_codex_command_line(tmp_path):
    argv = Codex(tools=tmp_path).command("--help me", tmp_path / "ws")
    assert argv[:3] == [str(tmp_path / "npm" / "node_modules" / ".bin" / "codex"), "exec", "--json"]
    assert argv[argv.index("-C") + 1] == str(tmp_path / "ws") and "--skip-git-repo-check" in argv
    assert argv[-2:] == ["--", "--help me"]


def test_codex_events(tmp_path):
    def item(kind: str, **fields) -> dict:
        return {"type": "item.completed", "item": {"type": kind, **fields}}

    done = [
        {"type": "thread.started"},
        item("error", message="Model metadata for `m` not found."),  # a warning, not a failure
        {"type": "turn.started"},
        item("command_execution", command="ls", exit_code=0),
        item("agent_message", text="All done."),
        {"type": "turn.completed", "usage": {}},
    ]
    out = parse_events(_jsonl(tmp_path / "a", done), returncode=0)
    assert (out.exit_kind, out.n_turns, out.n_tool_calls, out.final_message) == ("submitted", 2, 1, "All done.")
    failed = [{"type": "turn.started"}, {"type": "turn.failed", "error": {"message": "stream disconnected"}}]
    out = parse_events(_jsonl(tmp_path / "b", failed), returncode=1)
    assert out.exit_kind == "error" and out.error == "stream disconnected"
    assert parse_events(_jsonl(tmp_path / "c", [{"type": "thread.started"}]), returncode=0).exit_kind == "no_output"
    assert parse_events(tmp_path / "missing", returncode=-9, timed_out=True).exit_kind == "timeout"


# --- hermes ------------------------------------------------------------------------------------------------


def test_hermes_home_and_command_line(tmp_path):
    hermes = Hermes(tools=tmp_path, context_length=4096, max_output_tokens=512, max_retries=1)
    hermes.write_home(tmp_path / "home", base_url=URL)
    config = yaml.safe_load((tmp_path / "home" / "config.yaml").read_text())
    assert config["model"]["base_url"] == URL and config["model"]["api_key"] == "${HARNESS_RL_API_KEY}"
    assert config["model"]["context_length"] == MIN_CONTEXT_LENGTH  # hermes refuses less
    assert config["model"]["max_tokens"] == 512 and config["agent"]["api_max_retries"] == 1
    assert config["security"] == {"allow_lazy_installs": False, "tirith_enabled": False}
    assert json.loads((tmp_path / "home" / ".update_check").read_text())["ver"] == "0.19.0"
    argv = hermes.command("-x", step_limit=5)
    assert argv[1] == "chat" and "--query=-x" in argv and "--yolo" in argv
    assert argv[argv.index("--max-turns") + 1] == "4"  # plus its one tool-less summary call
    assert hermes.env(hermes_home=tmp_path, api_key="key1")["HERMES_DISABLE_LAZY_INSTALLS"] == "1"


def _hermes_records(home: Path, reason: str | None, *, api_calls: int = 2, tools: int = 1) -> Path:
    home.mkdir(parents=True)
    with sqlite3.connect(home / "state.db") as db:
        db.execute("CREATE TABLE sessions (id TEXT, started_at REAL, api_call_count INT, tool_call_count INT)")
        db.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT)")
        db.execute("INSERT INTO sessions VALUES ('s1', 1.0, ?, ?)", (api_calls, tools))
        db.executemany(
            "INSERT INTO messages (session_id, role, content) VALUES ('s1', ?, ?)",
            [("user", "task"), ("assistant", None), ("tool", "{}"), ("assistant", "All done.")],
        )
    db.close()
    if reason is not None:
        (home / "logs").mkdir()
        (home / "logs" / "agent.log").write_text(
            f"x INFO agent.conversation_loop: Turn ended: reason={reason} model=m\n"
        )
    return home


def test_hermes_outcomes(tmp_path):
    home = _hermes_records(tmp_path / "a", "text_response(finish_reason=stop)")
    out = parse_hermes_home(home, stdout="All done.\n", returncode=0)
    assert (out.exit_kind, out.n_turns, out.n_tool_calls, out.final_message) == ("submitted", 2, 1, "All done.")
    home = _hermes_records(tmp_path / "b", "max_iterations_reached(3/3)")
    assert parse_hermes_home(home, stdout="", returncode=0).exit_kind == "limits_exceeded"
    failed = parse_hermes_home(tmp_path / "none", stdout="API call failed after 2 retries: Connection error.\n",
                               returncode=1)  # fmt: skip
    assert failed.exit_kind == "error" and "Connection error" in failed.error
    assert parse_hermes_home(tmp_path / "none", stdout="", returncode=0).exit_kind == "no_output"
    assert parse_hermes_home(tmp_path / "none", stdout="", returncode=-9, timed_out=True).exit_kind == "timeout"
