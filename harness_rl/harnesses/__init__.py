"""Coding-agent harnesses run headless against the capture proxy, one module per harness."""

from harness_rl.harnesses.base import Harness, HarnessNotInstalledError, HarnessOutcome
from harness_rl.harnesses.mini_swe_agent import MiniSweAgent

#: Harness name -> implementation class (constructible with no arguments).
HARNESSES: dict[str, type] = {MiniSweAgent.name: MiniSweAgent}

__all__ = ["HARNESSES", "Harness", "HarnessNotInstalledError", "HarnessOutcome", "MiniSweAgent"]
