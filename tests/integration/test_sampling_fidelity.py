"""The engine samples, and records the log-probs of, the distribution the trainer computes: temperature only.

A model's generation_config.json may set top_k, min_p or a repetition penalty; vLLM applies those as every
request's defaults unless it starts with ``--generation-config vllm``. The trainer's importance ratio divides
by the recorded log-probs and assumes temperature-only sampling, so a model folder whose generation_config.json
sets them would otherwise bias every update. Here the embedded SmolLM2 gets such a file; the engine's recorded
(processed) log-probs at temperature 0.8 must equal transformers' on the same fp32 weights. The second test
starts the engine the other way and shows the same comparison failing, so the first cannot pass vacuously.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from harness_rl.engine.client import EngineClient
from harness_rl.engine.server import VLLMServer
from harness_rl.models.registry import EMBEDDED_MODELS
from harness_rl.train.logprobs import sequence_token_logprobs

pytestmark = pytest.mark.slow

TEMPERATURE = 0.8
#: What a model card might ship; each one alone changes the sampled distribution.
SKEWED_GENERATION_CONFIG = {"min_p": 0.2, "repetition_penalty": 1.5, "top_k": 5}
PROMPTS = ["Write one short sentence about cats.", "Name three colours.", "Count from one to five."]


@pytest.fixture(scope="module")
def skewed_model(model_dir, tmp_path_factory):
    """The embedded model with a generation_config.json that sets min_p, repetition_penalty and top_k."""
    folder = tmp_path_factory.mktemp("skewed") / "model"
    folder.mkdir()
    for item in model_dir.iterdir():
        if item.suffix == ".safetensors":
            (folder / item.name).symlink_to(item)  # the weights are read only
        elif item.is_file():
            shutil.copy(item, folder / item.name)
    path = folder / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **SKEWED_GENERATION_CONFIG}, indent=2))
    return folder


@pytest.fixture(scope="module")
def reference(skewed_model):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(skewed_model), dtype=torch.float32).eval()


def logprob_gaps(model_path, reference, tmp_path, generation_config: str) -> torch.Tensor:
    """|engine - transformers| per sampled token, over a few sampled completions."""
    spec = EMBEDDED_MODELS["smollm2-135m"]
    server = VLLMServer(
        str(model_path),
        served_model_name="skewed",
        max_lora_rank=8,
        max_loras=1,
        max_model_len=1024,
        dtype="float32",
        tool_parser=spec.tool_parser,
        chat_template=spec.chat_template,
        kv_cache_gib=1,
        logprobs_mode="processed_logprobs",
        generation_config=generation_config,
        log_path=tmp_path / "vllm.log",
        startup_timeout_s=900,
    )
    gaps = []
    with server, EngineClient(server.url) as client:
        for seed, prompt in enumerate(PROMPTS):
            body = {
                "model": "skewed",
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 24,
                "temperature": TEMPERATURE,
                "seed": seed,
                "logprobs": True,
                "return_token_ids": True,
            }
            reply = client.chat(body)
            choice = reply["choices"][0]
            prompt_ids, completion_ids = reply["prompt_token_ids"], choice["token_ids"]
            engine = torch.tensor([entry["logprob"] for entry in choice["logprobs"]["content"]])
            ids = torch.tensor(prompt_ids + completion_ids)
            mask = torch.cat([torch.zeros(len(prompt_ids)), torch.ones(len(completion_ids))])
            with torch.no_grad():
                trainer = sequence_token_logprobs(reference, ids, mask, temperature=TEMPERATURE)
            assert trainer.shape == engine.shape
            gaps.append((engine - trainer).abs())
    return torch.cat(gaps)


def test_recorded_logprobs_are_the_trainers_despite_the_models_generation_config(skewed_model, reference, tmp_path):
    gaps = logprob_gaps(skewed_model, reference, tmp_path, generation_config="vllm")
    print(f"generation_config=vllm: {gaps.numel()} tokens, max |diff| {gaps.max():.2e}, mean {gaps.mean():.2e}")
    assert gaps.max() < 1e-2
    assert gaps.mean() < 1e-3


def test_applying_the_models_generation_config_would_skew_the_recorded_logprobs(skewed_model, reference, tmp_path):
    gaps = logprob_gaps(skewed_model, reference, tmp_path, generation_config="auto")
    print(f"generation_config=auto: {gaps.numel()} tokens, max |diff| {gaps.max():.2e}, mean {gaps.mean():.2e}")
    assert gaps.max() > 0.1
