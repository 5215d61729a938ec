"""Coding-agent harnesses run headless against the capture proxy, one module per harness.

``HARNESSES`` maps each harness name to its adapter class. Adapter modules are imported on first use (a
rollout worker needs one harness, not all six; the ``install``/``list`` CLI needs none of their imports),
and a name is listed only once its module exists in the package.
"""

from __future__ import annotations

import importlib
import importlib.util
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

    def _available(self, name: str) -> bool:
        return name in self._adapters and importlib.util.find_spec(self._adapters[name][0]) is not None

    def __getitem__(self, name: str) -> type:
        if name not in self._loaded:
            if not self._available(name):
                raise KeyError(name)
            module, cls = self._adapters[name]
            self._loaded[name] = getattr(importlib.import_module(module), cls)
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._available(name)

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._adapters if self._available(name))

    def __len__(self) -> int:
        return sum(1 for _ in self)


#: Harness name -> implementation class (constructible with no arguments).
HARNESSES: Mapping[str, type] = _AdapterRegistry(ADAPTERS)


def __getattr__(name: str) -> type:
    # Keeps ``from harness_rl.harnesses import MiniSweAgent`` (and the other classes) working lazily.
    for key, (_, cls) in ADAPTERS.items():
        if cls == name:
            return HARNESSES[key]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ADAPTERS", "HARNESSES", "Harness", "HarnessNotInstalledError", "HarnessOutcome"]
