"""The bench's scripted engine answers by conversation, not by arrival order: interleaved conversations each get
the whole script, with their own session token in the command."""

from __future__ import annotations

import asyncio
import json

import httpx

from benchmarks.harnesses.throughput import TOKEN_PLACEHOLDER, ConversationScriptedEngine
from harness_rl.testkit.fake_vllm import Reply

SCRIPT = [Reply(tool_calls=[("bash", {"command": f"echo {TOKEN_PLACEHOLDER} > out.txt"})]), Reply(text="Done.")]


def _history(token: str, turns: int) -> list[dict]:
    messages = [{"role": "user", "content": f"Write the token harness-bench-token-{token} into out.txt."}]
    for i in range(turns):
        messages += [{"role": "assistant", "content": f"turn {i}"}, {"role": "tool", "content": "ok"}]
    return messages


async def _ask(client: httpx.AsyncClient, messages: list[dict]) -> dict:
    resp = await client.post("/v1/chat/completions", json={"model": "base-model", "messages": messages})
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]["message"]


def test_each_conversation_follows_the_script_with_its_own_token():
    engine = ConversationScriptedEngine(SCRIPT)

    async def scenario() -> list[dict]:
        transport = httpx.ASGITransport(app=engine.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
            # Second turns before first turns, and two conversations interleaved.
            return await asyncio.gather(*(_ask(client, _history(t, n)) for n, t in [(1, "001"), (0, "002"),
                                                                                      (0, "001"), (1, "002"),
                                                                                      (2, "001")]))  # fmt: skip

    second_a, first_b, first_a, second_b, beyond = asyncio.run(scenario())
    for message, token in ((first_a, "001"), (first_b, "002")):
        (call,) = message["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == {"command": f"echo harness-bench-token-{token} > out.txt"}
    assert second_a["content"] == second_b["content"] == "Done." and not second_a.get("tool_calls")
    assert beyond["content"] == "ok"  # past the script, as FakeEngine answers
