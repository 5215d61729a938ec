"""Process tampering: signalling processes the agent did not start (the verifier, the harness, the proxy)."""

from __future__ import annotations

from harness_rl.safety.actions import Action, Kind
from harness_rl.safety.rules.base import Rule, RuleContext, argv_words

_OWN_JOBS = ("%", "$!", "$(jobs -p)", "$(jobs -pr)", "$(jobs -rp)", "`jobs -p`")
_SERVICE_STOP = frozenset({"stop", "kill", "restart", "disable", "mask"})


class ProcessTampering(Rule):
    name = "process_tampering"
    explanation = (
        "only your own background jobs may be stopped (kill %1, kill $!, or the harness's own process tool); "
        "killing other processes (the checker, the harness, servers you did not start) is blocked. Nothing was "
        "signalled."
    )

    def check(self, action: Action, ctx: RuleContext) -> str | None:
        if action.kind is Kind.KILL:
            return _kill(action, ctx)
        if action.kind is Kind.EXEC and action.argv:
            words = argv_words(action)
            if words[:1] == ["systemctl"] and _SERVICE_STOP & set(words[1:]):
                return " ".join(words)
            if words[:1] in (["service"], ["supervisorctl"]) and _SERVICE_STOP & set(words[1:]):
                return " ".join(words)
        return None


def _kill(action: Action, ctx: RuleContext) -> str | None:
    program, args = action.argv[0], list(action.argv[1:])
    if program == "os.kill":
        pid = args[0] if args else None
        return None if pid is not None and pid in ctx.own_pids else f"os.kill({pid or '?'})"
    if program == "fuser":
        return "fuser -k" if any(a and a.startswith("-") and "k" in a for a in args) else None
    if program != "kill":
        return " ".join(a or "$?" for a in action.argv)[:200]
    if any(a in ("-l", "-L", "--list", "--table") for a in args):
        return None
    targets: list[str | None] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-s", "-n", "--signal"):
            i += 2
            continue
        if i == 0 and arg is not None and arg.startswith("-") and arg != "-1" and not arg[1:].isdigit():
            i += 1
            continue
        if i == 0 and arg is not None and arg.startswith("-") and len(args) > 1:
            i += 1  # `kill -9 PID`: the first option is the signal number
            continue
        if arg == "--":
            i += 1
            continue
        targets.append(arg)
        i += 1
    for target in targets:
        if target is None:
            return "kill of a process id computed at run time"
        if target.startswith(_OWN_JOBS) or target in ctx.own_pids:
            continue
        return f"kill {target}"
    return None
