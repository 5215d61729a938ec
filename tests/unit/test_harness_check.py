"""``python -m harness_rl.harnesses check``: a harness that is not installed is reported not ok with its install
command (and the exit status says so); the scripted engine makes each harness run one command and finish in
the way that harness finishes; unknown names are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness_rl.harnesses import HARNESSES
from harness_rl.harnesses.check import check_harness, expand_names, scripted_replies
from harness_rl.harnesses.mini_swe_agent import MiniSweAgent
from harness_rl.testkit.scripted_proxy import ScriptedProxy

REPO = Path(__file__).resolve().parents[2]


def test_check_all_without_installs_reports_each_harness_and_fails(tmp_path):
    env = {**os.environ, "HARNESS_RL_TOOLS": str(tmp_path / "empty-tools")}
    done = subprocess.run([sys.executable, "-m", "harness_rl.harnesses", "check", "all"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["harness"] for r in lines] == sorted(HARNESSES) and len(lines) == 6
    for r in lines:
        assert r["ok"] is False and r["version"] is None and r["requests"] == 0
        assert f"python -m harness_rl.harnesses install {r['harness']}" in r["error"]


def test_not_installed_harness_is_not_run(tmp_path):
    harness = HARNESSES["codex"](tools=tmp_path / "none")
    with ScriptedProxy() as proxy:
        result = check_harness(harness, proxy, tmp_path / "r")
        assert proxy.engine.requests == []
    assert not result.ok and result.exit_kind is None and "install codex" in result.error


def test_unknown_name_is_refused(tmp_path):
    with pytest.raises(KeyError):
        expand_names(["pi", "nope"])
    assert expand_names(["pi", "all"]) == ["pi"] + [n for n in sorted(HARNESSES) if n != "pi"]
    done = subprocess.run([sys.executable, "-m", "harness_rl.harnesses", "check", "nope"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "unknown harness" in done.stderr and done.stdout == ""


@pytest.mark.parametrize("name", ["pi", "opencode", "hermes", "claude_code", "codex"])
def test_script_calls_the_shell_tool_then_answers(name):
    harness = HARNESSES[name]()
    first, last = scripted_replies(harness, "echo x > out.txt")
    assert first.tool_calls == [(harness.shell_tool[0], {harness.shell_tool[1]: "echo x > out.txt"})]
    assert last.text and not last.tool_calls


def test_mini_script_submits_with_its_command_in_both_modes():
    text_first, text_last = scripted_replies(MiniSweAgent(mode="text"), "echo x > out.txt")
    assert "```bash\necho x > out.txt\n```" in text_first.text and not text_first.tool_calls
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in text_last.text
    tool_first, tool_last = scripted_replies(MiniSweAgent(mode="tool"), "echo x > out.txt")
    assert tool_first.tool_calls == [("bash", {"command": "echo x > out.txt"})]
    assert tool_last.tool_calls == [("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})]
