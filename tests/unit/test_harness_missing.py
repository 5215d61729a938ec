"""Every harness whose binary is missing refuses to run with an error that names its install command, and the
launcher's pre-flight check says the same before anything starts."""

from __future__ import annotations

import pytest

from harness_rl.harnesses import HARNESSES, HarnessNotInstalledError
from harness_rl.launch.components import check_harnesses_installed

SIX = ["pi", "opencode", "hermes", "claude_code", "codex", "mini_swe_agent"]


@pytest.mark.parametrize("name", SIX)
def test_missing_binary_names_the_install_command(name, tmp_path):
    harness = HARNESSES[name](tools=tmp_path / "no-tools")
    assert not harness.is_installed()
    install = f"python -m harness_rl.harnesses install {name}"
    with pytest.raises(HarnessNotInstalledError, match=install):
        harness.run(tmp_path / "ws", "x", base_url="http://127.0.0.1:9/v1", api_key="k", step_limit=1,
                    timeout_s=5, rollout_dir=tmp_path / "r")  # fmt: skip
    with pytest.raises(HarnessNotInstalledError, match=install):
        harness.version()
    with pytest.raises(HarnessNotInstalledError, match=install):
        check_harnesses_installed({name: harness})
    assert not (tmp_path / "r" / "harness.log").exists()  # nothing was started
