"""claude-code's own context limit ("blocking_limit", seen against the real engine with a 4,096-token window)
is reported as limits_exceeded, like its turn limit, not as an error."""

from __future__ import annotations

import json

from harness_rl.harnesses.claude_code import parse_result

# The events of that run, trimmed to the fields parse_result reads.
ASSISTANT = {"type": "assistant", "message": {"id": "msg_chatcmpl-b2daeb52cb506a33", "role": "assistant",
                                              "content": [{"type": "text", "text": "```\n# Tools\n"}]}}  # fmt: skip
RESULT = {"type": "result", "subtype": "success", "is_error": True, "terminal_reason": "blocking_limit",
          "num_turns": 2, "result": "Prompt is too long"}  # fmt: skip


def test_blocking_limit_is_a_limit(tmp_path):
    stdout = tmp_path / "harness.stdout"
    stdout.write_text("".join(json.dumps(e) + "\n" for e in (ASSISTANT, RESULT)))
    outcome = parse_result(stdout, returncode=1, max_turns=2)
    assert outcome.exit_kind == "limits_exceeded" and outcome.error is None
    assert outcome.exit_status == "blocking_limit" and outcome.n_turns == 1
    assert outcome.final_message == "Prompt is too long"
