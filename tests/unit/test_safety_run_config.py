"""The run-level safety settings: `safety=on|off|strict` from train.py's config reach the proxy gate, the rollout
settings and metadata.json (turning the gate off is recorded, never silent)."""

import json

from harness_rl.config.compose import compose_config
from harness_rl.launch.components import build_proxy_gate, rollout_settings, safety_summary, write_run_metadata


def test_default_run_has_the_gate_on_with_an_audit_log(tmp_path):
    cfg = compose_config([f"run_dir={tmp_path}"])
    gate = build_proxy_gate(cfg, tmp_path)
    try:
        assert gate is not None and gate.audit_path == tmp_path / "safety_audit.jsonl"
        assert gate.gate.config.undecidable == "allow"
    finally:
        gate.close()
    settings = rollout_settings(cfg)
    assert settings.safety is True and settings.block_penalty == 0.0
    assert safety_summary(cfg) == {"enabled": True, "undecidable": "allow", "rules_off": [], "block_penalty": 0.0}


def test_gate_off_is_recorded_in_the_metadata(tmp_path, caplog):
    cfg = compose_config([f"run_dir={tmp_path}", "safety=off", "safety.block_penalty=0.5"])
    assert build_proxy_gate(cfg, tmp_path) is None
    assert "safety gate OFF" in caplog.text
    settings = rollout_settings(cfg)
    assert settings.safety is False and settings.block_penalty == 0.0  # nothing is blocked, nothing to charge
    write_run_metadata(tmp_path, cfg, "model", {}, isolation="none")
    assert json.loads((tmp_path / "metadata.json").read_text())["safety"]["enabled"] is False


def test_strict_and_single_rule_switches(tmp_path):
    cfg = compose_config([f"run_dir={tmp_path}", "safety=strict", "safety.rules.network_egress=false"])
    summary = safety_summary(cfg)
    assert summary["undecidable"] == "block" and summary["rules_off"] == ["network_egress"]
    gate = build_proxy_gate(cfg, tmp_path)
    try:
        assert [rule.name for rule in gate.gate.rules if rule.name == "network_egress"] == []
    finally:
        gate.close()
