"""Where a harness runs: the Sandbox protocols, the local (bubblewrap) and the docker implementations."""

from harness_rl.sandbox.base import ContainerSandbox, ProcessResult, Sandbox, SandboxClosedError, SandboxLayout
from harness_rl.sandbox.docker import DockerSandbox
from harness_rl.sandbox.local import LocalSandbox, base_env, bwrap_usable

__all__ = [
    "ContainerSandbox",
    "DockerSandbox",
    "LocalSandbox",
    "ProcessResult",
    "Sandbox",
    "SandboxClosedError",
    "SandboxLayout",
    "base_env",
    "bwrap_usable",
]
