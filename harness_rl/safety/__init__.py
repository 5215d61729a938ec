"""Safety gate: inspect every tool call before the harness runs it and block reward hacking.

See :mod:`harness_rl.safety.gate` for the API the proxy uses.
"""

from harness_rl.safety.config import RULE_NAMES, SafetyConfig
from harness_rl.safety.gate import Decision, GateContext, SafetyGate

__all__ = ["RULE_NAMES", "Decision", "GateContext", "SafetyConfig", "SafetyGate"]
