"""Real vLLM CPU serves the embedded model with token ids and log-probs that match transformers, and loads,
uses and unloads LoRA adapters at runtime; a failed start leaves no process behind."""

from __future__ import annotations

import json
import os

import httpx
import pytest
import torch

from harness_rl.engine.adapters import AdapterRegistry
from harness_rl.engine.client import EngineClient, EngineError
from harness_rl.engine.server import EngineStartError, VLLMServer

pytestmark = pytest.mark.slow

BASE = "smollm2-135m"
MESSAGES = [{"role": "user", "content": "Write one short sentence about cats."}]


@pytest.fixture
def client(engine):
    with EngineClient(engine.url) as c:
        yield c


@pytest.fixture(scope="session")
def lora_dir(model_dir, tmp_path_factory):
    """A rank-8 all-linear LoRA with random non-zero B, so it visibly changes the model's outputs."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.mul_(0.1)
    out = tmp_path_factory.mktemp("lora") / "adapter"
    peft_model.save_pretrained(out)
    return out


def chat(client: EngineClient, model: str, **overrides) -> dict:
    body = {"model": model, "messages": MESSAGES, "max_tokens": 12, "temperature": 0.0, "logprobs": True,
            "return_token_ids": True, **overrides}  # fmt: skip
    return client.chat(body)


def sampled_logprobs(reply: dict) -> list[float]:
    return [entry["logprob"] for entry in reply["choices"][0]["logprobs"]["content"]]


def test_engine_is_healthy_and_serves_the_base_model(engine, client):
    assert client.health()
    assert client.models() == [BASE]
    assert engine.url.startswith("http://127.0.0.1:")


def test_reply_carries_token_ids_and_logprobs(client):
    reply = chat(client, BASE, max_tokens=64)
    choice = reply["choices"][0]
    prompt, completion = reply["prompt_token_ids"], choice["token_ids"]
    assert prompt[:2] == [1, 9690]  # <|im_start|>system
    assert len(completion) == len(sampled_logprobs(reply)) == reply["usage"]["completion_tokens"]
    if choice["finish_reason"] == "stop":
        assert completion[-1] == 2  # <|im_end|> is sampled, returned and has a log-prob


def test_stream_chunks_carry_token_ids_and_logprobs(engine, client):
    body = {"model": BASE, "messages": MESSAGES, "max_tokens": 12, "temperature": 1.0, "seed": 7, "logprobs": True,
            "return_token_ids": True, "stream": True}  # fmt: skip
    prompt, tokens, logprobs = None, [], []
    with httpx.stream("POST", f"{engine.url}/v1/chat/completions", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            prompt = chunk.get("prompt_token_ids", prompt)  # only on the first chunk
            for choice in chunk["choices"]:
                tokens += choice.get("token_ids") or []
                if choice.get("logprobs"):
                    logprobs += [e["logprob"] for e in choice["logprobs"]["content"]]
    reply = chat(client, BASE, temperature=1.0, seed=7)
    assert prompt == reply["prompt_token_ids"]
    assert tokens == reply["choices"][0]["token_ids"]
    assert logprobs == pytest.approx(sampled_logprobs(reply), abs=1e-5)


def test_fp32_logprobs_match_transformers(model_dir, client):
    from transformers import AutoModelForCausalLM

    reply = chat(client, BASE, temperature=1.0, seed=3, max_tokens=24)
    prompt, completion = reply["prompt_token_ids"], reply["choices"][0]["token_ids"]
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0]
    reference = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(-1, torch.tensor(completion)[:, None])
    assert reference[:, 0].tolist() == pytest.approx(sampled_logprobs(reply), abs=1e-3)


def test_processed_logprobs_are_those_of_the_tempered_distribution(model_dir, client):
    """The trainer divides logits by the sampling temperature; the engine must report the same distribution."""
    from transformers import AutoModelForCausalLM

    reply = chat(client, BASE, temperature=0.7, seed=5, max_tokens=24)
    prompt, completion = reply["prompt_token_ids"], reply["choices"][0]["token_ids"]
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0] / 0.7
    reference = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(-1, torch.tensor(completion)[:, None])
    assert reference[:, 0].tolist() == pytest.approx(sampled_logprobs(reply), abs=1e-3)


def test_adapter_load_use_unload(client, lora_dir):
    base = sampled_logprobs(chat(client, BASE))
    client.load_adapter("cats-v0", lora_dir)
    try:
        assert sorted(client.models()) == sorted([BASE, "cats-v0"])
        adapted = sampled_logprobs(chat(client, "cats-v0"))
        assert max(abs(a - b) for a, b in zip(base, adapted, strict=False)) > 1e-2
    finally:
        client.unload_adapter("cats-v0")
    assert client.models() == [BASE]
    with pytest.raises(EngineError) as err:
        chat(client, "cats-v0")
    assert err.value.status_code == 404


def test_registry_defers_unload_until_release(client, lora_dir):
    registry = AdapterRegistry(client, max_live_versions=2)
    registry.publish("pi", 0, lora_dir)
    registry.publish("pi", 1, lora_dir)
    registry.acquire("pi-v0")
    registry.retire_older_than("pi", 1)
    assert "pi-v0" in client.models()
    chat(client, "pi-v0")  # an in-flight session still finishes on its version
    registry.release("pi-v0")
    assert "pi-v0" not in client.models()
    registry.retire_older_than("pi", 2)
    assert client.models() == [BASE]


def test_bad_model_path_raises_with_log_tail_and_leaves_no_process(tmp_path):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    server = VLLMServer(str(empty), served_model_name="broken", max_lora_rank=8, max_loras=1, kv_cache_gib=1,
                        log_path=tmp_path / "vllm.log", startup_timeout_s=180)  # fmt: skip
    with pytest.raises(EngineStartError) as err:
        server.start()
    assert err.value.log_tail.strip()
    assert str(tmp_path / "vllm.log") in str(err.value)
    assert server.pid is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(server.pid, 0)
