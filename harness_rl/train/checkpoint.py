"""Adapters and checkpoints written atomically: a reader (vLLM, a resumed job) never sees a half-written folder.

Everything is first written into a sibling temporary folder, then renamed into place; a rename within one
filesystem is atomic, so a crash leaves either the old state or the new one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch


def _atomic_dir(target: Path):
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))


def _publish_dir(staged: Path, target: Path) -> None:
    if target.exists():
        # Replacing an existing folder cannot be a single rename; move the old one aside first.
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(staged, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staged, target)


def save_adapter_atomically(model: Any, target: Path) -> Path:
    """``model.save_pretrained`` (PEFT adapter only) into ``target`` atomically."""
    staged = _atomic_dir(target)
    try:
        model.save_pretrained(staged)
        _publish_dir(staged, Path(target))
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return Path(target)


def save_checkpoint(model: Any, optimizer: torch.optim.Optimizer, root: Path, step: int,
                    state: dict[str, Any]) -> Path:  # fmt: skip
    """Write ``root/step_<step>/`` with the adapter, optimizer state, RNG states and ``trainer_state.json``."""
    target = Path(root) / f"step_{step:06d}"
    staged = _atomic_dir(target)
    try:
        model.save_pretrained(staged / "adapter")
        torch.save(optimizer.state_dict(), staged / "optimizer.pt")
        torch.save(
            {"torch": torch.get_rng_state(), "python": random.getstate()},
            staged / "rng.pt",
        )
        (staged / "trainer_state.json").write_text(json.dumps(state, indent=2, default=str))
        _publish_dir(staged, target)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return target


def load_checkpoint(model: Any, optimizer: torch.optim.Optimizer, path: Path) -> dict[str, Any]:
    """Restore adapter weights, optimizer and RNG from a ``save_checkpoint`` folder; returns its state."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(path)
    weights = load_file(str(path / "adapter" / "adapter_model.safetensors"))
    set_peft_model_state_dict(model, weights)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    return json.loads((path / "trainer_state.json").read_text())
