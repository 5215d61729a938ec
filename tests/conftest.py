"""Shared fixtures: the embedded model and one real vLLM CPU engine per test session.

vLLM's CPU build takes ~35 s to start and its first request a few seconds more, so every integration test
shares one engine (session scope). It runs fp32 with ``processed_logprobs``, as `python train.py` does on CPU.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU; this machine has none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def model_dir():
    """The embedded SmolLM2-135M-Instruct, converted once into the cache (`make model` does it ahead)."""
    from harness_rl.models.fetch import ensure_model

    return ensure_model("smollm2-135m")


@pytest.fixture(scope="session")
def engine(model_dir, tmp_path_factory):
    """One real vLLM CPU server for the whole session, stopped (by PID) at the end."""
    from harness_rl.engine.server import VLLMServer
    from harness_rl.models.registry import EMBEDDED_MODELS

    spec = EMBEDDED_MODELS["smollm2-135m"]
    server = VLLMServer(
        str(model_dir),
        served_model_name="smollm2-135m",
        max_lora_rank=16,
        max_loras=4,
        max_model_len=4096,
        dtype="float32",
        tool_parser=spec.tool_parser,
        chat_template=spec.chat_template,
        kv_cache_gib=1,
        logprobs_mode="processed_logprobs",
        log_path=tmp_path_factory.mktemp("engine") / "vllm.log",
    )
    with server:
        yield server
