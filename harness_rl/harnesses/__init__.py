"""Coding-agent harnesses run headless against the capture proxy, one module per harness.

``HARNESSES`` maps each harness name to its adapter class. Adapter modules are imported on first use (a
rollout worker needs one harness, not all six; the ``install``/``list`` CLI needs none of their imports).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from harness_rl.harnesses.base import Harness, HarnessNotInstalledError, HarnessOutcome

#: Harness name -> (module, class) of its adapter. The class's ``name`` attribute equals the key.
ADAPTERS: dict[str, tuple[str, str]] = {
    "pi": ("harness_rl.harnesses.pi", "Pi"),
    "opencode": ("harness_rl.harnesses.opencode", "OpenCode"),
    "hermes": ("harness_rl.harnesses.hermes", "Hermes"),
    "claude_code": ("harness_rl.harnesses.claude_code", "ClaudeCode"),
    "codex": ("harness_rl.harnesses.codex", "Codex"),
    "mini_swe_agent": ("harness_rl.harnesses.mini_swe_agent", "MiniSweAgent"),
}


class _AdapterRegistry(Mapping[str, type]):
    """Read-only name -> adapter class mapping that imports an adapter module when it is first looked up."""

    def __init__(self, adapters: dict[str, tuple[str, str]]) -> None:
        self._adapters = adapters
        self._loaded: dict[str, type] = {}

    def __getitem__(self, name: str) -> type:
        if name not in self._loaded:
            if name not in self._adapters:
                raise KeyError(name)
            module, cls = self._adapters[name]
            self._loaded[name] = getattr(importlib.import_module(module), cls)
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self._adapters

    def __iter__(self) -> Iterator[str]:
        return iter(self._adapters)

    def __len__(self) -> int:
        return len(self._adapters)


#: Harness name -> implementation class (constructible with no arguments).
HARNESSES: Mapping[str, type] = _AdapterRegistry(ADAPTERS)


def __getattr__(name: str) -> type:
    # Keeps ``from harness_rl.harnesses import MiniSweAgent`` (and the other classes) working lazily.
    for key, (_, cls) in ADAPTERS.items():
        if cls == name:
            return HARNESSES[key]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ADAPTERS", "HARNESSES", "Harness", "HarnessNotInstalledError", "HarnessOutcome"]
