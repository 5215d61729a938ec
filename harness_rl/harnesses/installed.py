"""The install side of the Harness protocol (binary, install, is_installed, version), shared by the adapters.

Every adapter keeps its pinned spec in ``self._spec`` (``NPM_TOOLS[name]`` or ``PYTHON_TOOLS[name]``) and its
tools folder in ``self.tools``; these mixins turn that into the four protocol members and the "not installed"
error that names the install command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness_rl.harnesses.base import HarnessNotInstalledError
from harness_rl.harnesses.install import (
    install_command,
    install_npm_tool,
    install_python_tool,
    npm_binary,
    read_npm_stamp,
    read_stamp,
    venv_dir,
)


class _Installed:
    name: str
    tools: Path | None
    _spec: Any

    def version(self) -> str:
        """See ``Harness.version``."""
        if not self.is_installed():
            raise self._not_installed()
        return self._pinned_version()

    def is_installed(self) -> bool:  # defined by NpmInstalled and VenvInstalled
        raise NotImplementedError

    def _pinned_version(self) -> str:  # defined by NpmInstalled and VenvInstalled
        raise NotImplementedError

    @property
    def binary(self) -> Path:  # defined by NpmInstalled and VenvInstalled
        raise NotImplementedError

    def _not_installed(self) -> HarnessNotInstalledError:
        return HarnessNotInstalledError(
            f"{self.name} ({self._spec.requirement}) is not installed at {self.binary}; "
            f"install it with: {install_command(self.name)}"
        )


class NpmInstalled(_Installed):
    """A harness from the project's shared npm prefix."""

    @property
    def binary(self) -> Path:
        """Path of the harness's command in the shared npm prefix."""
        return npm_binary(self._spec, self.tools)

    def install(self) -> Path:
        """See ``Harness.install``."""
        return install_npm_tool(self._spec, self.tools)

    def is_installed(self) -> bool:
        """See ``Harness.is_installed``."""
        return read_npm_stamp(self._spec, self.tools) is not None

    def _pinned_version(self) -> str:
        return self._spec.version


class VenvInstalled(_Installed):
    """A Python harness in its own venv under the tools folder."""

    @property
    def binary(self) -> Path:
        """Path of the harness's console script in its venv."""
        return venv_dir(self._spec, self.tools) / "bin" / self._spec.binary

    def install(self) -> Path:
        """See ``Harness.install``."""
        return install_python_tool(self._spec, self.tools)

    def is_installed(self) -> bool:
        """See ``Harness.is_installed``."""
        return read_stamp(self._spec, self.tools) is not None

    def _pinned_version(self) -> str:
        return self._spec.requirement.split("==", 1)[1]
