"""With a harness mix (``harness=four``) every GRPO group runs in exactly one harness: each harness has its own
rollout worker, and all rollouts of a group it produces ran in that harness, under ``rollouts/<harness>/``."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import openai

from harness_rl.config.compose import compose_config
from harness_rl.engine.adapters import AdapterRegistry
from harness_rl.envs.smoke import load_smoke_tasks
from harness_rl.harnesses.base import HarnessOutcome
from harness_rl.launch.components import build_harness, rollout_settings
from harness_rl.rollout.proxy_admin import ProxyAdmin
from harness_rl.rollout.worker import RolloutWorker, TaskSampler
from harness_rl.sandbox.local import LocalSandbox
from harness_rl.testkit.scripted_proxy import ScriptedProxy

#: (harness name, rollout folder) of every run, across all workers.
RUNS: list[tuple[str, Path]] = []
RUNS_LOCK = threading.Lock()


class RecordingHarness:
    """Stands in for one real harness of the mix: one model call through the proxy, and a record of the run."""

    dialect = "openai_chat"
    step_limit_is_hard = True
    shell_tool = ("bash", "command")

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, task_workspace, instruction, *, base_url, api_key, step_limit, timeout_s, rollout_dir):
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": instruction}])
        with RUNS_LOCK:
            RUNS.append((self.name, Path(rollout_dir)))
        return HarnessOutcome("submitted", 0, 1, "ok", None, 0.0, False)


class NoEngine:
    def load_adapter(self, name, path) -> None:
        pass

    def unload_adapter(self, name) -> None:
        pass


def test_four_mix_builds_the_four_harnesses():
    cfg = compose_config(["harness=four"])
    assert list(cfg.harness.mix) == ["opencode", "claude_code", "codex", "mini_swe_agent"]
    sandbox = LocalSandbox(use_bwrap=False)
    built = {name: build_harness(name, cfg, sandbox) for name in cfg.harness.mix}
    assert {name: h.name for name, h in built.items()} == {n: n for n in cfg.harness.mix}
    assert all(h.sandbox is sandbox for h in built.values())


def test_each_group_runs_in_one_harness(tmp_path):
    cfg = compose_config(["harness=four", "trainer.num_generations=2"])
    settings = rollout_settings(cfg)
    registry = AdapterRegistry(NoEngine(), max_live_versions=2)
    RUNS.clear()
    with ScriptedProxy() as proxy:
        admin = ProxyAdmin(proxy.url, proxy.admin_token)
        workers = {}
        for index, name in enumerate(cfg.harness.mix):
            registry.publish(name, 0, tmp_path / "adapter")
            workers[name] = RolloutWorker(
                harness=RecordingHarness(name),
                sampler=TaskSampler(load_smoke_tasks("train"), seed=index),
                proxy=admin,
                registry=registry,
                settings=settings,
                num_generations=2,
                max_sessions=4,  # two groups of each harness in flight at once
                run_dir=tmp_path / "run",
            ).start()
        groups = {name: [] for name in workers}
        deadline = time.monotonic() + 120
        while any(len(g) < 2 for g in groups.values()) and time.monotonic() < deadline:
            for name, worker in workers.items():
                while not worker.groups.empty():
                    groups[name].append(worker.groups.get())
            time.sleep(0.05)
        for worker in workers.values():
            worker.request_stop()
        for worker in workers.values():
            worker.join()
        admin.close()
    assert all(not w.errors for w in workers.values())
    ran_in = {folder: harness for harness, folder in RUNS}
    for name, produced in groups.items():
        assert len(produced) >= 2
        for group in produced:
            assert group.harness == name and len(group.rollouts) == 2
            folders = [r.rollout_dir for r in group.rollouts]
            assert {ran_in[f] for f in folders} == {name}  # never mixed within a group
            assert all(f.parent.parent.name == name for f in folders)  # rollouts/<harness>/g<id>/r<i>
            assert group.policy_version == 0 and {r.adapter for r in group.rollouts} == {f"{name}-v0"}
