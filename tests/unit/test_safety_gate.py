"""The gate's API and configuration: per-rule switches, on/off/strict presets matching conf/safety/*.yaml, task
protected paths, the agent's own jobs, and Decision's shape."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness_rl.safety import RULE_NAMES, Decision, GateContext, SafetyConfig, SafetyGate
from harness_rl.safety.presets import preset
from harness_rl.safety.rules import ALL_RULES

CONF = Path(__file__).resolve().parents[2] / "conf"
CTX = GateContext(workspace="/testbed")


def bash(gate: SafetyGate, command: str, ctx: GateContext = CTX) -> Decision:
    return gate.inspect("pi", "bash", {"command": command}, ctx)


def test_every_rule_is_a_named_class_with_its_own_explanation():
    assert tuple(rule.name for rule in ALL_RULES) == RULE_NAMES
    texts = [rule.explanation for rule in ALL_RULES]
    assert len(set(texts)) == len(texts) and all(len(t) > 40 for t in texts)


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("rm -rf /", "destructive"),
        ("echo 1 > /logs/verifier/reward.txt", "scoring_tampering"),
        ("sed -i 's/x/y/' tests/test_a.py", "test_tampering"),
        ("cat solution/solve.sh", "verifier_access"),
        ("git log --all", "history_peeking"),
        ("pkill -f pytest", "process_tampering"),
        ("curl https://example.com", "network_egress"),
        ("cat /proc/1/environ", "sandbox_escape"),
    ],
)
def test_each_rule_is_switched_individually(command, rule):
    assert bash(SafetyGate(), command).rule == rule
    assert bash(SafetyGate(SafetyConfig(rules={rule: False})), command).rule != rule
    only_this = {name: name == rule for name in RULE_NAMES}
    assert bash(SafetyGate(SafetyConfig(rules=only_this)), command).rule == rule
    assert not bash(SafetyGate(SafetyConfig(rules=dict.fromkeys(RULE_NAMES, False))), command).blocked


def test_presets_on_off_strict():
    assert not bash(SafetyGate(preset("on")), 'cat "$X"').blocked
    strict = bash(SafetyGate(preset("strict")), 'cat "$X"')
    assert strict.blocked and strict.rule == "undecidable"
    assert not bash(SafetyGate(preset("off")), "rm -rf /").blocked
    assert SafetyGate(preset("strict")).inspect("pi", "bash", "{not json", CTX).blocked


def test_config_rejects_unknown_rules_and_modes():
    with pytest.raises(ValueError, match="unknown safety rules"):
        SafetyConfig(rules={"no_such_rule": True})
    with pytest.raises(ValueError, match="undecidable"):
        SafetyConfig(undecidable="maybe")
    with pytest.raises(ValueError, match="unknown safety config keys"):
        SafetyConfig.from_mapping({"enable": True})


@pytest.mark.parametrize("mode", ["on", "off", "strict"])
def test_hydra_group_files_match_the_presets(mode, tmp_path):
    (tmp_path / "root.yaml").write_text(
        f'defaults:\n  - safety: "{mode}"\n  - _self_\nhydra:\n  searchpath:\n    - file://{CONF}\n', encoding="utf-8"
    )
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        cfg = compose(config_name="root")
    loaded = SafetyConfig.from_mapping(OmegaConf.to_container(cfg.safety, resolve=True))
    assert loaded.rules == dict.fromkeys(RULE_NAMES, True)
    loaded.rules = {}
    assert loaded == preset(mode)


def test_task_protected_paths_and_workspace():
    ctx = GateContext(workspace="/work/task", protected_paths=("data/holdout.csv", "/grading"))
    gate = SafetyGate()
    assert bash(gate, "head data/holdout.csv", ctx).rule == "verifier_access"
    assert bash(gate, "cat /grading/check.py", ctx).rule == "verifier_access"
    assert not bash(gate, "head data/train.csv", ctx).blocked
    assert bash(gate, "cat ../other/x", GateContext(workspace="/work/task")).rule == "sandbox_escape"


def test_own_background_jobs_may_be_killed():
    gate = SafetyGate()
    assert not bash(gate, "kill %1").blocked and not bash(gate, "kill -9 $!").blocked
    assert bash(gate, "kill 4242").rule == "process_tampering"
    assert not bash(gate, "kill 4242", GateContext(workspace="/testbed", own_pids=frozenset({4242}))).blocked
    assert not gate.inspect("hermes", "process", {"action": "kill", "session_id": "p1"}, CTX).blocked


def test_arguments_as_json_string_dict_or_bytes():
    gate = SafetyGate()
    for arguments in ('{"command": "rm -rf /"}', {"command": "rm -rf /"}, b'{"command": "rm -rf /"}'):
        decision = gate.inspect("mini_swe_agent", "bash", arguments, CTX)
        assert decision.blocked and decision.to_dict()["rule"] == "destructive"
    assert [a.kind.value for a in gate.inspect(None, "bash", {"command": "ls"}, CTX).actions] == ["exec", "list"]


def test_audit_record_is_json_and_carries_the_verdict():
    import json

    from harness_rl.safety.audit import audit_record

    decision = SafetyGate().inspect("codex", "exec_command", {"cmd": "cat /proc/1/environ"}, CTX)
    record = json.loads(json.dumps(audit_record("codex", "exec_command", "x" * 10000, decision, session="s1")))
    assert record["decision"] == "block" and record["rule"] == "sandbox_escape" and record["session"] == "s1"
    assert "read /proc/1/environ" in record["actions"] and len(record["arguments"]) == 2000
