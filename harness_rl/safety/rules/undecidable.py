"""What static analysis cannot settle: paths from variables, eval, dynamic code, unparsable or oversized input."""

from __future__ import annotations

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.rules.base import Rule, RuleContext


class Undecidable(Rule):
    name = "undecidable"
    explanation = (
        "the gate could not tell statically what this call does (a path or command computed at run time, eval, "
        "dynamic code, or input it cannot parse), and this run blocks such calls. Nothing was run; write the "
        "command with literal paths and commands."
    )

    def check(self, action: Action, ctx: RuleContext) -> str | None:
        if action.kind is Kind.UNDECIDABLE and ctx.config.undecidable == "block":
            return action.detail
        return None
