"""The scripted capture proxy for harness tests; it lives in the package (``harness_rl.proxy.scripted``) so that
``python -m harness_rl.harnesses check`` can use it too."""

from harness_rl.proxy.scripted import ADMIN_TOKEN, ScriptedProxy, bash_block_then_submit, shell_then_done

__all__ = ["ADMIN_TOKEN", "ScriptedProxy", "bash_block_then_submit", "shell_then_done"]
