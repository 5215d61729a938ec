"""Where a harness runs: the Sandbox protocol and the local (bubblewrap) implementation."""

from harness_rl.sandbox.base import ProcessResult, Sandbox, SandboxLayout
from harness_rl.sandbox.local import LocalSandbox, base_env, bwrap_usable

__all__ = ["LocalSandbox", "ProcessResult", "Sandbox", "SandboxLayout", "base_env", "bwrap_usable"]
