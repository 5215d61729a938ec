"""The three presets of the ``safety`` config group, for code that runs without Hydra (CLI, bench, tests).

They mirror ``conf/safety/{on,off,strict}.yaml``: ``on`` lets undecidable calls through, ``strict`` blocks
them, ``off`` disables the gate.
"""

from __future__ import annotations

from harness_rl.safety.config import SafetyConfig


def preset(mode: str) -> SafetyConfig:
    """``SafetyConfig`` for ``on``, ``strict`` or ``off``."""
    if mode == "on":
        return SafetyConfig()
    if mode == "strict":
        return SafetyConfig(undecidable="block")
    if mode == "off":
        return SafetyConfig(enabled=False)
    raise ValueError(f"unknown safety preset {mode!r}; use on, strict or off")
