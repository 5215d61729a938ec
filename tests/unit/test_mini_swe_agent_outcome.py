"""mini-swe-agent's command line carries our text-mode config and limits, and its trajectory's exit status
maps onto the normalized exit kinds (fast: no binary is run)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from harness_rl.harnesses import HARNESSES, Harness, MiniSweAgent
from harness_rl.harnesses.install import STAMP_NAME
from harness_rl.harnesses.mini_swe_agent import TEXT_CONFIG, parse_trajectory


def test_mini_is_a_registered_harness():
    assert isinstance(MiniSweAgent(), Harness)
    assert HARNESSES["mini_swe_agent"] is MiniSweAgent and MiniSweAgent.dialect == "openai_chat"


def test_text_mode_command_line(tmp_path):
    argv = MiniSweAgent(tools=tmp_path).command(
        "Create a file.", base_url="http://127.0.0.1:1/v1", api_key="0123", step_limit=4, trajectory=tmp_path / "t.json"
    )
    assert argv[0] == str(tmp_path / "venvs" / "mini_swe_agent" / "bin" / "mini")
    assert "--task=Create a file." in argv and "--yolo" in argv and "--exit-immediately" in argv
    assert argv[argv.index("--model-class") + 1] == "litellm_textbased"
    specs = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
    assert specs[0] == str(TEXT_CONFIG)
    assert "agent.step_limit=4" in specs and "agent.cost_limit=0" in specs
    assert 'model.model_kwargs.api_key="0123"' in specs  # JSON-quoted: mini would turn 0123 into a number
    assert 'model.model_kwargs.api_base="http://127.0.0.1:1/v1"' in specs
    assert argv[-2:] == ["-o", str(tmp_path / "t.json")]


def test_tool_mode_uses_minis_default_config(tmp_path):
    argv = MiniSweAgent(mode="tool", tools=tmp_path).command(
        "x", base_url="u", api_key="k", step_limit=1, trajectory=tmp_path / "t.json"
    )
    assert "--model-class" not in argv and argv[argv.index("-c") + 1] == "mini.yaml"
    with pytest.raises(ValueError):
        MiniSweAgent(mode="xml")


def test_text_config_takes_only_the_first_bash_block():
    config = yaml.safe_load(TEXT_CONFIG.read_text())
    regex = config["model"]["action_regex"]
    reply = "Sure.\n```bash\necho cat > a.txt\n```\nThen:\n```bash\nrm -rf /\n```"
    assert [a.strip() for a in re.findall(regex, reply, re.DOTALL)] == ["echo cat > a.txt"]
    assert re.findall(regex, "no code here", re.DOTALL) == []
    template = config["agent"]["instance_template"]
    assert "{{task}}" in template and "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in template
    assert template.count("```bash\n") == 4  # three worked examples + the submit command


def _traj(tmp_path: Path, exit_status: str, messages: list[dict], api_calls: int, **extra) -> Path:
    path = tmp_path / "traj.json"
    info = {"exit_status": exit_status, "submission": "", "model_stats": {"api_calls": api_calls}}
    path.write_text(json.dumps({"info": info, "messages": messages, **extra}))
    return path


ACT = {"role": "assistant", "content": "```bash\nls\n```", "extra": {"actions": [{"command": "ls"}]}}
OBS = {"role": "user", "content": "<returncode>0</returncode>"}


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        ("Submitted", "submitted"),
        ("LimitsExceeded", "limits_exceeded"),
        ("TimeExceeded", "limits_exceeded"),
        ("RepeatedFormatError", "format_error"),
    ],  # fmt: skip
)
def test_exit_statuses_map_to_exit_kinds(tmp_path, status, kind):
    outcome = parse_trajectory(_traj(tmp_path, status, [ACT, OBS, ACT, OBS], api_calls=3))
    assert outcome.exit_kind == kind and outcome.exit_status == status
    assert outcome.n_turns == 3 and outcome.n_tool_calls == 2 and outcome.error is None


def test_exception_exit_is_an_error_with_its_message(tmp_path):
    exit_msg = {"role": "exit", "content": "boom", "extra": {"exit_status": "InternalServerError",
                                                             "exception_str": "Connection error."}}  # fmt: skip
    outcome = parse_trajectory(_traj(tmp_path, "InternalServerError", [exit_msg], api_calls=1))
    assert outcome.exit_kind == "error" and outcome.error == "Connection error."


def test_missing_or_torn_trajectory(tmp_path):
    assert parse_trajectory(tmp_path / "none.json").exit_kind == "no_output"
    assert parse_trajectory(tmp_path / "none.json", timed_out=True).exit_kind == "timeout"
    (tmp_path / "torn.json").write_text('{"info": {')
    assert parse_trajectory(tmp_path / "torn.json").exit_kind == "error"


def test_timeout_wins_but_keeps_turns(tmp_path):
    outcome = parse_trajectory(_traj(tmp_path, "", [ACT, OBS], api_calls=1), timed_out=True)
    assert outcome.exit_kind == "timeout" and outcome.n_turns == 1 and outcome.n_tool_calls == 1
    assert outcome.to_dict()["trajectory_path"].endswith("traj.json")


def test_install_stamp_decides_whether_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_RL_TOOLS", str(tmp_path / "tools"))
    harness = MiniSweAgent()
    assert harness.binary == tmp_path / "tools" / "venvs" / "mini_swe_agent" / "bin" / "mini"
    harness.binary.parent.mkdir(parents=True)
    harness.binary.write_text("")
    assert not harness.is_installed()  # binary without stamp: an interrupted install
    stamp = harness.binary.parent.parent / STAMP_NAME
    stamp.write_text(json.dumps({"requirement": "mini-swe-agent==2.4.5"}))
    assert not harness.is_installed()  # another pinned version
    stamp.write_text(json.dumps({"requirement": "mini-swe-agent==2.4.6"}))
    assert harness.is_installed() and harness.version() == "2.4.6"
    assert harness.install() == harness.binary  # no-op: nothing is rebuilt
    assert harness.binary.read_text() == ""
