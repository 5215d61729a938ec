"""Each of the six harnesses completes a real rollout against the real vLLM CPU engine (the embedded SmolLM2-135M)
behind the real capture proxy: whatever the model answers, the run ends by itself, nothing it started outlives
it, and the proxy holds a non-empty training sequence made of the engine's own tokens and log-probs.

Prompt sizes decide the engine. Measured through the embedded model's chat template (first request, tools
included): mini-swe-agent (text mode) 163 tokens, claude-code ``--bare`` 1,166 (12,309 without it), pi 1,515,
hermes with only its ``terminal`` toolset 2,940 (13,678 with its 17 default tools), codex 5,587 and opencode
7,376. The first four fit the shared 4,096-token ``engine``; codex and opencode get a second engine with the
model's native 8,192 (``max_position_embeddings``). Replies are capped at 64 tokens and each run at two steps,
so the CPU time stays bounded; decoding is greedy, so a given prompt always gets the same answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, get_args

import httpx
import pytest

from harness_rl.harnesses import HARNESSES
from harness_rl.harnesses.base import ExitKind
from harness_rl.proxy.server import ProxyServer
from tests.processes import DescendantWatcher
from tests.proxy_helpers import new_session, trace

pytestmark = [pytest.mark.slow, pytest.mark.harness]

ADMIN = "real-engine-admin"
BASE = "smollm2-135m"
LONG_CONTEXT = 8192  # SmolLM2-135M's max_position_embeddings
SHORT_CONTEXT = 4096  # the shared `engine` fixture's max_model_len
VOCAB_SIZE = 49152
STEP_LIMIT = 2
MAX_TOKENS = 64
TIMEOUT_S = 150
INSTRUCTION = "Create a file named out.txt containing the word hello."

#: harness -> (adapter keyword arguments, engine context). Each adapter is told the context it really has and
#: asks for few output tokens (the session's sampling cap applies to the ones that send no max_tokens).
SETUPS: dict[str, tuple[dict[str, Any], int]] = {
    "mini_swe_agent": ({}, SHORT_CONTEXT),
    "claude_code": ({"bare": True, "context_length": SHORT_CONTEXT, "max_output_tokens": MAX_TOKENS}, SHORT_CONTEXT),
    "pi": ({"context_length": SHORT_CONTEXT, "max_output_tokens": MAX_TOKENS}, SHORT_CONTEXT),
    "hermes": ({"max_output_tokens": MAX_TOKENS, "extra_args": ["--toolsets", "terminal"]}, SHORT_CONTEXT),
    "codex": ({"context_length": LONG_CONTEXT}, LONG_CONTEXT),
    "opencode": ({"context_length": LONG_CONTEXT, "max_output_tokens": MAX_TOKENS}, LONG_CONTEXT),
}


@pytest.fixture(scope="module")
def long_engine(model_dir, tmp_path_factory):
    """A second vLLM CPU server with the model's full 8,192-token context, for codex and opencode."""
    from harness_rl.engine.server import VLLMServer
    from harness_rl.models.registry import EMBEDDED_MODELS

    spec = EMBEDDED_MODELS[BASE]
    server = VLLMServer(
        str(model_dir),
        served_model_name=BASE,
        max_lora_rank=16,
        max_loras=4,
        max_model_len=LONG_CONTEXT,
        dtype="float32",
        tool_parser=spec.tool_parser,
        chat_template=spec.chat_template,
        kv_cache_gib=1,
        logprobs_mode="processed_logprobs",
        log_path=tmp_path_factory.mktemp("long-engine") / "vllm.log",
    )
    with server:
        yield server


@pytest.fixture
def proxy_for(request) -> Iterator[Any]:
    """``proxy_for(context)`` -> (proxy, admin client) in front of the engine with that context length."""
    opened: list[Any] = []

    def open_proxy(context: int) -> tuple[ProxyServer, httpx.Client]:
        engine = request.getfixturevalue("engine" if context == SHORT_CONTEXT else "long_engine")
        assert engine.max_model_len == context
        proxy = ProxyServer(engine.url, ADMIN, base_model=BASE).start()
        admin = httpx.Client(
            base_url=proxy.url, headers={"Authorization": f"Bearer {ADMIN}"}, trust_env=False, timeout=60
        )
        opened.append((proxy, admin))
        return proxy, admin

    yield open_proxy
    for proxy, admin in opened:
        admin.close()
        proxy.stop()


def expected_failure(failure: dict[str, Any]) -> bool:
    """A later call that outgrew the tiny context (the model ran a command with long output): the engine's
    own 400, which the harness sees as an API error. Anything else is a capture or relay fault."""
    return (
        failure["kind"] == "upstream_error"
        and failure.get("status") == 400
        and "maximum context length" in failure["message"]
    )


@pytest.mark.parametrize("name", list(SETUPS))
def test_real_rollout_yields_a_training_sequence(name, proxy_for, tmp_path):
    kwargs, context = SETUPS[name]
    harness = HARNESSES[name](**kwargs)
    harness.install()
    proxy, admin = proxy_for(context)
    # Hard limits get a little slack (claude re-asks after a reply cut at max_tokens, hermes makes one
    # summary call); soft ones are held to the step limit by the proxy, as the rollout worker does.
    budget = STEP_LIMIT + 2 if getattr(harness, "step_limit_is_hard", False) else STEP_LIMIT
    key = new_session(admin, max_requests=budget, sampling={"temperature": 0.0, "max_tokens": MAX_TOKENS})
    start = time.monotonic()
    with DescendantWatcher() as watcher:
        outcome = harness.run(tmp_path / "ws", INSTRUCTION, base_url=f"{proxy.url}/v1", api_key=key,
                              step_limit=STEP_LIMIT, timeout_s=TIMEOUT_S, rollout_dir=tmp_path / "r")  # fmt: skip
    # For the record (pytest -s); never asserted.
    print(f"{name}: {time.monotonic() - start:.1f} s, {outcome.exit_kind}, {outcome.n_turns} model calls")

    assert outcome.exit_kind in get_args(ExitKind) and not outcome.timed_out, outcome
    assert outcome.n_turns >= 1, outcome  # the harness's own record shows the model calls the engine answered
    assert watcher.alive() == []
    captured = trace(admin, key)
    assert [f for f in captured["failures"] if not expected_failure(f)] == [], captured["failures"]
    answered = [n for n in captured["nodes"] if not n["budget_exhausted"]]
    assert answered and answered[0]["dialect"] == harness.dialect
    first = answered[0]
    assert 0 < len(first["prompt_token_ids"]) <= context
    assert 0 < len(first["completion_token_ids"]) <= MAX_TOKENS
    sequences = captured["sequences"]
    assert sequences
    for seq in sequences:
        assert len(seq["input_ids"]) == len(seq["loss_mask"]) == len(seq["logprobs"]) > 0
        assert sum(seq["loss_mask"]) > 0
        assert all(0 <= t < VOCAB_SIZE for t in seq["input_ids"])
        sampled = [lp for lp, m in zip(seq["logprobs"], seq["loss_mask"], strict=True) if m]
        assert all(lp <= 0.0 for lp in sampled)
    # The first call's prompt and reply open one of the sequences, token for token.
    head = first["prompt_token_ids"] + first["completion_token_ids"]
    assert any(seq["input_ids"][: len(head)] == head for seq in sequences)


def test_setups_cover_every_harness():
    assert sorted(SETUPS) == sorted(HARNESSES)
