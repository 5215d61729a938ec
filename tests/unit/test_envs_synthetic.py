"""Synthetic environments: the three trajectory formats read into one form, the four task types generated from a
replayed trajectory keep only tasks whose oracle passes and whose empty attempt fails, the budget checker fails
closed without a tool-call count, and splits are disjoint by trajectory and the same on every rebuild."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness_rl.envs.sources import get_builder
from harness_rl.envs.sources.synthetic import CORPUS_DIR, SyntheticBuilder, assign_splits
from harness_rl.envs.sources.synthetic_check import answers_match, check_state
from harness_rl.envs.sources.synthetic_replay import keep, oracle_and_empty
from harness_rl.envs.sources.synthetic_trajectory import (
    chatml_decoder,
    load_trajectory,
    make_action,
    parse_observation,
    read_chat_messages,
)
from harness_rl.envs.sources.synthetic_types import generate
from harness_rl.envs.spec import TaskSpec
from scripts.record_trajectories import to_atif, to_chat, to_text
from scripts.trajectory_sessions import Session, Step

WORKSPACE = {"nums.txt": "4\n9\n16\n", "tool.sh": "#!/bin/bash\nset -e\nsort --bogus nums.txt > out/sorted.txt\n"}
SESSION = Session(
    "t",
    "chat",
    "Make tool.sh write nums.txt sorted numerically to out/sorted.txt.",
    WORKSPACE,
    [
        Step("What is the largest number in nums.txt?", "sort -n nums.txt | tail -1"),
        Step("Run the tool.", "bash tool.sh"),
        Step("Fix the flag.", "sed -i 's/--bogus/-n/' tool.sh"),
        Step("Create the output folder.", write=("out/.keep", "")),
        Step("Run the tool again.", "bash tool.sh"),
    ],
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """The test session recorded for real in the chat format (and ATIF and text variants beside it)."""
    from scripts.record_trajectories import run_session

    folder = tmp_path_factory.mktemp("corpus")
    results = run_session(SESSION)
    (folder / "t.chat.json").write_text(json.dumps(to_chat(SESSION, results)))
    (folder / "t.atif.json").write_text(json.dumps(to_atif(SESSION, results)))
    text_session = Session("t2", "text", SESSION.task, WORKSPACE, [s for s in SESSION.steps if s.command])
    (folder / "t2.text.json").write_text(json.dumps(to_text(text_session, run_session(text_session))))
    return folder


def test_the_three_file_formats_read_into_the_same_actions(recorded):
    chat, atif = load_trajectory(recorded / "t.chat.json"), load_trajectory(recorded / "t.atif.json")
    assert (chat.origin, atif.origin) == ("chat", "atif")
    assert chat.task == atif.task == SESSION.task and chat.workspace == atif.workspace == WORKSPACE
    assert chat.actions == atif.actions
    first, failed = chat.actions[0], chat.actions[1]
    assert (first.command, first.output, first.exit_code) == ("sort -n nums.txt | tail -1", "16\n", 0)
    assert first.thought == "What is the largest number in nums.txt?"
    assert failed.exit_code == 1 and "out/sorted.txt: No such file or directory" in failed.output
    assert chat.actions[3].write == ("out/.keep", "") and chat.actions[3].command is None
    text = load_trajectory(recorded / "t2.text.json")
    assert text.task == SESSION.task  # the mini-style "Task:" prefix is cut off
    assert [(a.command, a.output, a.exit_code) for a in text.actions][:2] == [
        (a.command, a.output, a.exit_code) for a in chat.actions[:2]
    ]


def test_observation_styles_give_output_and_exit_status():
    assert parse_observation("<returncode>2</returncode>\n<output>\nboom\n</output>") == ("boom\n", 2)
    assert parse_observation('{"exit_code": 1, "output": "no"}') == ("no", 1)
    assert parse_observation('{"stdout": "x", "returncode": 0}') == ("x", 0)
    assert parse_observation("Exit code: 3\nfailed") == ("failed", 3)
    assert parse_observation("plain text") == ("plain text", None)
    assert parse_observation(None) == (None, None)


def test_structured_calls_hermes_tags_and_text_blocks():
    call = {"id": "a", "type": "function", "function": {"name": "shell", "arguments": '{"cmd": ["bash", "-lc", "ls"]}'}}
    messages = [
        {"role": "user", "content": "do it"},
        {"role": "assistant", "content": "Look.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": "Exit code: 0\nx.txt"},
    ]
    task, actions = read_chat_messages(messages)
    assert task == "do it" and actions[0].command == "ls" and actions[0].output == "x.txt"
    tagged = 'Hm.<tool_call>{"name": "bash", "arguments": {"command": "pwd"}}</tool_call>'
    hermes = [
        {"role": "user", "content": "t"},
        {"role": "assistant", "content": tagged},
        {"role": "tool", "content": "/app"},
    ]
    _, actions = read_chat_messages(hermes)
    assert (actions[0].command, actions[0].output, actions[0].thought) == ("pwd", "/app", "Hm.")
    text = [
        {"role": "user", "content": "t"},
        {"role": "assistant", "content": "```bash\necho hi\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\nhi\n</output>"},
        {"role": "assistant", "content": "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
    ]
    _, actions = read_chat_messages(text)
    assert [(a.command, a.output, a.exit_code) for a in actions] == [("echo hi", "hi\n", 0)]


def test_shell_and_write_tools_are_recognised_and_others_not_replayed():
    assert make_action("Bash", {"command": "ls"}, None, "").command == "ls"  # Claude Code
    assert make_action("shell", {"command": ["bash", "-lc", "pwd"]}, None, "").command == "pwd"  # codex
    assert make_action("Write", {"file_path": "a.txt", "content": "x"}, None, "").write == ("a.txt", "x")
    editor = "str_replace_based_edit_tool"
    assert make_action(editor, {"command": "create", "path": "b", "file_text": "y"}, None, "").write == ("b", "y")
    for tool, args in [(editor, {"command": "view", "path": "b"}), ("web_search", {"command": "rm -rf x"})]:
        assert not make_action(tool, args, None, "").replayable


def test_chatml_traces_decode_with_a_tokenizer():
    class Tokenizer:  # a stand-in: decode() is all the reader uses
        def decode(self, ids, skip_special_tokens):
            return bytes(ids).decode()

    text = (
        "<|im_start|>user\nlist<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
        '{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\na.txt\n</tool_response><|im_end|>\n"
    )
    messages = chatml_decoder(Tokenizer())(list(text.encode()))
    _, actions = read_chat_messages(messages)
    assert [(a.command, a.output) for a in actions] == [("ls", "a.txt")]


def test_captured_rollout_traces_are_read_back():
    text = load_trajectory(CORPUS_DIR / "rollout-mini-even")  # mini-swe-agent's ```bash blocks
    assert text.origin == "rollout" and text.workspace and text.task.startswith("Count the even numbers")
    assert [(a.command, a.output, a.exit_code) for a in text.actions[:1]] == [("wc -l < numbers.txt", "7\n", 0)]
    tools = load_trajectory(CORPUS_DIR / "rollout-mini-tools-max")  # its bash tool calls
    assert [a.command for a in tools.actions] == [
        "sort -n prices.txt | tail -1",
        "sort -n prices.txt | tail -1 > out/max.txt",
        "mkdir out",
        "sort -n prices.txt | tail -1 > out/max.txt",
    ]  # the submit call is not an action
    assert tools.actions[0].output == "19.99\n" and tools.actions[1].exit_code != 0


def _by_type(specs: list[TaskSpec]) -> dict[str, list[TaskSpec]]:
    out: dict[str, list[TaskSpec]] = {}
    for spec in specs:
        out.setdefault(spec.metadata["type"], []).append(spec)
    return out


def test_one_trajectory_yields_the_four_types_with_working_checkers(recorded):
    specs = _by_type(generate(load_trajectory(recorded / "t.chat.json")))
    assert set(specs) == {"qa", "state", "fix", "budget"}
    qa = specs["qa"][0]
    assert "What is the largest number in nums.txt?" in qa.instruction and '"expected": "16"' in qa.tests["check.json"]
    fix = specs["fix"][0]
    assert "bash tool.sh" in fix.instruction and "No such file or directory" in fix.instruction
    budget = specs["budget"][0]
    assert budget.metadata == {**budget.metadata, "budget": 4, "trajectory_tool_calls": 5}
    assert "at most 4 tool calls" in budget.instruction
    for spec in [s for group in specs.values() for s in group]:
        assert spec.group == "t-chat" and spec.source == "synthetic"
        assert oracle_and_empty(spec) == (1.0, 0.0), spec.id


def test_a_nondeterministic_trajectory_keeps_no_state_task(tmp_path):
    session = Session(
        "n",
        "chat",
        "Write a fresh random token to token.txt.",
        {"a.txt": "x\n"},
        [
            Step("Write it.", "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n' > token.txt"),
        ],
    )
    from scripts.record_trajectories import run_session

    (tmp_path / "n.json").write_text(json.dumps(to_chat(session, run_session(session))))
    specs = generate(load_trajectory(tmp_path / "n.json"))
    assert [s.metadata["type"] for s in specs] == ["state"]
    assert not keep(specs[0])  # the replayed oracle writes another token


def _run_check(spec: TaskSpec, workspace: dict[str, str], tool_calls: str | None, tmp_path: Path):
    tests, ws, logs = tmp_path / "tests", tmp_path / "ws", tmp_path / "logs"
    for root, files in ((tests, spec.tests), (ws, workspace)):
        for rel, content in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(content)
    env = {k: v for k, v in os.environ.items() if k != "HRL_TOOL_CALLS"}
    if tool_calls is not None:
        env["HRL_TOOL_CALLS"] = tool_calls
    proc = subprocess.run(
        [sys.executable, str(tests / "check.py"), str(tests / "check.json"), str(ws), str(logs)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    reward = json.loads((logs / "reward.json").read_text())["reward"] if proc.returncode == 0 else None
    return proc.returncode, reward


def test_the_budget_checker_counts_calls_and_fails_closed_without_a_count(recorded, tmp_path):
    budget = _by_type(generate(load_trajectory(recorded / "t.chat.json")))["budget"][0]
    solved = {
        **WORKSPACE,
        "tool.sh": WORKSPACE["tool.sh"].replace("--bogus", "-n"),
        "out/sorted.txt": "4\n9\n16\n",
        "out/.keep": "",
    }
    assert _run_check(budget, solved, "4", tmp_path / "a") == (0, 1.0)
    assert _run_check(budget, solved, "5", tmp_path / "b") == (0, 0.0)
    assert _run_check(budget, WORKSPACE, "1", tmp_path / "d") == (0, 0.0)
    assert _run_check(budget, solved, None, tmp_path / "c") == (2, None)  # unscorable, not reward 0
    # Under Harbor the count comes from the agent's ATIF trajectory beside the verifier's logs.
    agent = tmp_path / "e" / "agent"
    agent.mkdir(parents=True)
    calls = [{"tool_call_id": str(n), "function_name": "bash", "arguments": {}} for n in range(5)]
    (agent / "trajectory.json").write_text(json.dumps({"steps": [{"source": "agent", "tool_calls": calls}]}))
    assert _run_check(budget, solved, None, tmp_path / "e") == (0, 0.0)


def test_answers_and_files_are_normalised(tmp_path):
    assert answers_match(" 16 \n", "16") and answers_match("16.0", "16") and answers_match("1,234", "1234")
    assert answers_match("'Carl@Example.org'.", "carl@example.org")
    assert not answers_match("17", "16") and not answers_match("", "16")
    tests, ws = tmp_path / "tests", tmp_path / "ws"
    (tests / "expected").mkdir(parents=True)
    ws.mkdir()
    (tests / "expected" / "f000").write_text('{"title": "Weekly", "n": 2}\n')
    (tests / "expected" / "f001").write_text("a\nb\n")
    (ws / "s.json").write_text('{ "n": 2,\n  "title": "Weekly" }')
    (ws / "t.txt").write_text("a  \nb")
    spec = {"files": {"s.json": "f000", "t.txt": "f001"}, "deleted": ["gone.txt"], "max_tool_calls": None}
    assert check_state(spec, ws, tests, tmp_path / "logs") == 1.0
    (ws / "t.txt").write_text("b\na\n")
    (ws / "gone.txt").write_text("still here")
    assert check_state(spec, ws, tests, tmp_path / "logs") == pytest.approx(1 / 3)


def test_splits_are_disjoint_by_trajectory_and_stable(recorded):
    first = list(SyntheticBuilder(recorded, heldout_fraction=0.5).build(seed=3))
    again = list(SyntheticBuilder(recorded, heldout_fraction=0.5).build(seed=3))
    assert first == again and first
    groups: dict[str, set[str]] = {}
    for task in first:
        groups.setdefault(task.group, set()).add(task.split)
    assert all(len(splits) == 1 for splits in groups.values())
    train = {t.id for t in SyntheticBuilder(recorded, heldout_fraction=0.5).build(seed=3, split="train")}
    heldout = {t.id for t in SyntheticBuilder(recorded, heldout_fraction=0.5).build(seed=3, split="heldout")}
    assert train and heldout and not train & heldout and train | heldout == {t.id for t in first}
    assert assign_splits(["a", "b", "c", "d"], 7, 0.25) == assign_splits(["d", "c", "b", "a"], 7, 0.25)
    assert sorted(assign_splits(["a", "b", "c", "d"], 7, 0.25).values()) == ["heldout", "train", "train", "train"]


def test_builder_contract(recorded):
    builder = get_builder("synthetic", trajectories=recorded)
    assert builder.name == "synthetic" and builder.splits == ("train", "heldout")
    assert len(list(builder.build(n=2))) == 2
    with pytest.raises(ValueError):
        list(builder.build(split="eval"))
    with pytest.raises(ValueError):
        list(builder.build(n=10_000))
    only_fix = list(get_builder("synthetic", trajectories=recorded, kinds=("fix",)).build())
    assert only_fix and {t.metadata["type"] for t in only_fix} == {"fix"}
    with pytest.raises(ValueError):
        get_builder("synthetic", kinds=("trivia",))
