"""The gate's rules, one class each, in the order they are evaluated (the first objection names the block)."""

from __future__ import annotations

from harness_rl.safety.config import RULE_NAMES, SafetyConfig
from harness_rl.safety.rules.access import HistoryPeeking, VerifierAccess
from harness_rl.safety.rules.base import Rule, RuleContext
from harness_rl.safety.rules.destructive import Destructive
from harness_rl.safety.rules.network import NetworkEgress
from harness_rl.safety.rules.process import ProcessTampering
from harness_rl.safety.rules.sandbox import SandboxEscape
from harness_rl.safety.rules.tampering import ScoringTampering, TestTampering
from harness_rl.safety.rules.undecidable import Undecidable

ALL_RULES: tuple[type[Rule], ...] = (
    Destructive,
    ScoringTampering,
    TestTampering,
    VerifierAccess,
    HistoryPeeking,
    ProcessTampering,
    NetworkEgress,
    SandboxEscape,
    Undecidable,
)
assert tuple(r.name for r in ALL_RULES) == RULE_NAMES, "config.RULE_NAMES must list the rules in this order"


def build_rules(config: SafetyConfig) -> list[Rule]:
    """Instances of the rules switched on in ``config``, in evaluation order."""
    return [rule() for rule in ALL_RULES if config.rule_enabled(rule.name)]


__all__ = ["ALL_RULES", "Rule", "RuleContext", "build_rules"]
