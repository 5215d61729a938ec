"""Placement: the study's nodes are picked by their model files and fit; impossible ones fail naming the keys;
each part of a run gets the device its placement gives it; model sizes are counted as PEFT and torch count."""

from __future__ import annotations

import pytest
import torch

from harness_rl.config.compose import compose_config
from harness_rl.config.validators import ConfigError
from harness_rl.launch.placement import (
    DeviceError,
    check_devices,
    engine_devices,
    engine_env,
    engine_tensor_parallel_size,
    trainer_device,
)
from harness_rl.models.size import size_from_config

STUDY = [("lfm3", "h200x2"), ("lfm25_24b_a2b", "h200x4"), ("twil_8b", "h200x4")]


@pytest.mark.parametrize(("model", "placement"), STUDY)
def test_study_models_pick_their_node_and_fit(model, placement):
    cfg = compose_config([f"model={model}", "harness=all", "engine=gpu"])
    assert cfg.placement.name == placement
    assert cfg.trainer.device == "auto" and cfg.trainer.gradient_checkpointing == "auto"


def test_default_placement_is_the_cpu_and_the_command_line_wins():
    assert compose_config([]).placement.name == "cpu"
    assert compose_config(["model=lfm3", "placement=cpu"]).placement.name == "cpu"
    assert compose_config(["model=twil_8b", "harness=all", "placement=h200x4_tp2"]).placement.engine_gpus == [0, 1]


def test_24b_with_engine_and_trainers_on_one_gpu_does_not_fit():
    overrides = [
        "model=lfm25_24b_a2b",
        "harness=all",
        "placement=h200x2",
        "placement.gpus=1",
        "placement.trainer_gpus=[0]",
    ]
    with pytest.raises(ConfigError) as err:
        compose_config(overrides)
    message = str(err.value)
    assert "GPU 0 holds 3 trainer(s) of lfm2.5-24b-a2b" in message
    for key in ("engine.gpu_memory_utilization", "trainer.token_budget", "placement.trainer_gpus"):
        assert key in message


def test_trainer_beside_an_engine_at_095_does_not_fit():
    with pytest.raises(ConfigError, match=r"what vLLM leaves on it, \(1 - engine.gpu_memory_utilization=0.95\)"):
        compose_config(
            ["model=lfm3", "harness=all", "placement.trainer_gpus=[0]", "engine.gpu_memory_utilization=0.95"]
        )
    # The same GPU at the default share holds them: the rule is about what is left, not about sharing.
    compose_config(["model=lfm3", "harness=all", "placement.trainer_gpus=[0]", "engine.gpu_memory_utilization=0.5"])


def test_engine_weights_must_fit_its_share():
    with pytest.raises(ConfigError, match="put vLLM on more GPUs"):
        compose_config(["model=lfm25_24b_a2b", "harness=all", "engine.gpu_memory_utilization=0.3"])
    compose_config(
        [
            "model=lfm25_24b_a2b",
            "harness=all",
            "engine.gpu_memory_utilization=0.3",
            "placement=h200x4_tp2",
            "trainer.token_budget=32768",
        ]
    )


def test_smaller_gpus_need_a_smaller_budget():
    with pytest.raises(ConfigError, match="trainer.token_budget=131072"):
        compose_config(["model=lfm25_24b_a2b", "harness=all", "placement.gpu_memory_gib=80"])
    compose_config(["model=lfm25_24b_a2b", "harness=all", "placement.gpu_memory_gib=80", "trainer.token_budget=16384"])


def test_gpu_index_outside_the_node_is_named():
    with pytest.raises(ConfigError, match=r"GPU index\(es\) \[5\] outside the node's placement.gpus=4"):
        compose_config(["model=twil_8b", "placement.trainer_gpus=[5]"])


def test_unknown_size_asks_for_the_published_figures():
    with pytest.raises(ConfigError, match="set model.params_b"):
        compose_config(["model=lfm3", "model.path=Org/Unknown", "model.params_b=null"])


def test_device_spellings_and_lfm2_tree_packing():
    with pytest.raises(ConfigError, match="trainer.device='gpu'"):
        compose_config(["trainer.device=gpu"])
    with pytest.raises(ConfigError, match="trainer.gradient_checkpointing"):
        compose_config(["trainer.gradient_checkpointing=sometimes"])
    assert compose_config(["model=lfm3", "trainer.packing=tree"]).trainer.packing == "tree"


def test_trainer_devices_follow_the_placement():
    two = compose_config(["model=lfm3", "harness=all", "engine=gpu"])
    assert [trainer_device(two, i, cuda_available=True) for i in range(3)] == ["cuda:1"] * 3
    assert [trainer_device(two, i, cuda_available=False) for i in range(3)] == ["cpu"] * 3
    four = compose_config(["model=twil_8b", "harness=all", "engine=gpu"])
    assert [trainer_device(four, i, cuda_available=True) for i in range(3)] == ["cuda:1", "cuda:2", "cuda:3"]
    cpu = compose_config(["harness=all"])
    assert trainer_device(cpu, 0, cuda_available=True) == "cpu"  # the default placement keeps today's CPU trainers
    assert trainer_device(compose_config(["trainer.device=cuda"]), 0, cuda_available=True) == "cuda:0"
    assert trainer_device(compose_config(["model=lfm3", "trainer.device=cuda:0"]), 0) == "cuda:0"
    assert trainer_device(compose_config(["model=lfm3", "trainer.device=cpu"]), 0, cuda_available=True) == "cpu"


def test_engine_gpus_and_tensor_parallel(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = compose_config(["model=twil_8b", "harness=all", "engine=gpu", "placement=h200x4_tp2"])
    assert engine_devices(cfg) == [0, 1] and engine_tensor_parallel_size(cfg) == 2
    assert engine_env(cfg) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")  # a scheduler's allocation: indices count within it
    assert engine_env(cfg) == {"CUDA_VISIBLE_DEVICES": "4,5"}
    on_cpu = compose_config(["model=twil_8b", "engine=cpu"])
    assert engine_devices(on_cpu) == [] and engine_env(on_cpu) == {} and engine_tensor_parallel_size(on_cpu) == 1


def test_check_devices_one_line_per_missing_device():
    gpu = compose_config(["model=lfm3", "harness=all", "engine=gpu"])
    with pytest.raises(DeviceError, match=r"engine.backend=gpu but the installed vLLM is the CPU build.*engine=cpu"):
        check_devices(gpu, cuda_count=2, build="cpu")
    with pytest.raises(DeviceError, match="engine.backend=gpu but torch sees no CUDA device"):
        check_devices(gpu, cuda_count=0, build="gpu")
    with pytest.raises(DeviceError, match=r"engine.backend=auto \(resolved to gpu\) but torch sees no CUDA"):
        check_devices(compose_config(["model=lfm3"]), cuda_count=0, build="gpu")
    with pytest.raises(DeviceError, match=r"placed on cuda:1 .* this machine has 1 CUDA device"):
        check_devices(gpu, cuda_count=1, build="gpu")
    with pytest.raises(DeviceError, match=r"placement h200x4 puts vLLM on GPU\(s\) \[3\] but this machine has 2"):
        check_devices(
            compose_config(["model=twil_8b", "engine=gpu", "placement.engine_gpus=[3]"]), cuda_count=2, build="gpu"
        )
    with pytest.raises(DeviceError, match="trainer.device=cuda but torch sees no CUDA device"):
        check_devices(compose_config(["trainer.device=cuda"]), cuda_count=0, build="cpu")
    check_devices(gpu, cuda_count=2, build="gpu")
    check_devices(compose_config(["model=lfm3", "harness=all"]), cuda_count=0, build="cpu")  # inert on a CPU box
    assert "\n" not in str(DeviceError("x"))


def _tiny(config) -> tuple[torch.nn.Module, object]:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config), config


def _save(tmp_path, config):
    config.save_pretrained(tmp_path)
    return tmp_path / "config.json"


@pytest.mark.parametrize("kind", ["lfm2", "lfm2_moe", "llama"])
def test_size_from_config_counts_what_torch_and_peft_count(kind, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import Lfm2Config, Lfm2MoeConfig, LlamaConfig

    common = dict(vocab_size=256, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2)
    config = {
        "lfm2": lambda: Lfm2Config(**common, intermediate_size=128, layer_types=["conv", "full_attention"] * 2),
        "lfm2_moe": lambda: Lfm2MoeConfig(
            **common,
            intermediate_size=128,
            moe_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            num_dense_layers=1,
            layer_types=["conv", "full_attention"] * 2,
        ),
        "llama": lambda: LlamaConfig(**common, intermediate_size=128),
    }[kind]()
    model, config = _tiny(config)
    size = size_from_config(_save(tmp_path, config))
    assert size.params == sum(p.numel() for p in model.parameters())
    peft = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    assert size.lora_params(4) == sum(p.numel() for p in peft.parameters() if p.requires_grad)
    assert (size.hidden_size, size.num_layers, size.vocab_size) == (64, 4, 256)
