"""Errors that mean "fix your input or your machine" rather than "harness-rl has a bug".

Entry points print these as one line (plus the engine's log tail, which the message carries) instead of
a traceback; everything else propagates with its full traceback.
"""

from harness_rl.config.validators import ConfigError
from harness_rl.engine.client import EngineError
from harness_rl.engine.server import EngineStartError
from harness_rl.harnesses.base import HarnessNotInstalledError
from harness_rl.models.fetch import ModelFetchError
from harness_rl.sandbox.isolation import UnisolatedSandboxError

USER_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    EngineError,
    EngineStartError,
    HarnessNotInstalledError,
    ModelFetchError,
    NotImplementedError,
    UnisolatedSandboxError,
)
