"""DockerSandbox builds the documented ``docker run`` line and, at the wall-clock limit, kills the container by
the name it gave it. No docker daemon here: a fake ``docker`` executable on PATH (a real subprocess) records its
arguments and environment, runs ``run``'s command itself and stops it on ``kill <name>``."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from harness_rl.sandbox import ContainerSandbox, Sandbox, SandboxClosedError, SandboxLayout
from harness_rl.sandbox.docker import DockerSandbox

IMAGE = "harness-rl/test-image:1"

FAKE_DOCKER = r'''#!{python}
"""Fake docker: logs each call; `run` runs the command after the image; `kill NAME` SIGKILLs that run."""
import json, os, signal, subprocess, sys
state = {state!r}
args = sys.argv[1:]
with open(os.path.join(state, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"argv": args, "env": dict(os.environ), "stdin": os.readlink("/proc/self/fd/0")}}) + "\n")
if args[0] == "kill":
    pidfile = os.path.join(state, args[1] + ".pid")
    if not os.path.exists(pidfile):
        sys.exit(1)
    os.kill(int(open(pidfile).read()), signal.SIGKILL)
    sys.exit(0)
name = args[args.index("--name") + 1]
inner = args[args.index({image!r}) + 1:]
child = subprocess.Popen(inner, cwd=args[args.index("--workdir") + 1], stdin=subprocess.DEVNULL)
open(os.path.join(state, name + ".pid"), "w").write(str(child.pid))
rc = child.wait()
sys.exit(137 if rc < 0 else rc)
'''


@pytest.fixture
def fake_docker(tmp_path, monkeypatch) -> Path:
    """Puts a recording fake ``docker`` first on PATH; returns its state folder (``calls.jsonl``, pid files)."""
    bin_dir, state = tmp_path / "bin", tmp_path / "docker-state"
    bin_dir.mkdir()
    state.mkdir()
    script = bin_dir / "docker"
    script.write_text(FAKE_DOCKER.format(python=sys.executable, state=str(state), image=IMAGE))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return state


def calls(state: Path) -> list[dict]:
    return [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()]


def layout(tmp_path: Path) -> SandboxLayout:
    return SandboxLayout.for_rollout(tmp_path / "r", readonly=(tmp_path / "tools",))


def test_is_a_container_sandbox():
    sandbox = DockerSandbox(IMAGE)
    assert isinstance(sandbox, ContainerSandbox) and isinstance(sandbox, Sandbox)
    assert sandbox.isolation == "docker"


def test_command_line(tmp_path):
    lay = layout(tmp_path)
    sandbox = DockerSandbox(IMAGE, memory_bytes=4 << 30, readonly_paths=(tmp_path / "repo",), cpus=2)
    cmd = sandbox.command(["pi", "-p", "hi"], lay, name="harness-rl-abc", env_names=["HOME", "OPENAI_API_KEY"])
    assert cmd[:3] == ["docker", "run", "--rm"]
    pairs = set(zip(cmd, cmd[1:], strict=False))
    assert {("--name", "harness-rl-abc"), ("--network", "host"), ("--memory", str(4 << 30)),
            ("--memory-swap", str(4 << 30)), ("--cpus", "2"), ("--user", f"{os.getuid()}:{os.getgid()}"),
            ("--workdir", str(lay.workspace)), ("--env", "HOME"), ("--env", "OPENAI_API_KEY")} <= pairs  # fmt: skip
    assert "--read-only" in cmd and "--init" in cmd
    assert not {"-i", "--interactive", "-t", "--tty"} & set(cmd)  # stdin stays closed
    mounts = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--mount"]
    for ro in (tmp_path / "repo", tmp_path / "tools"):
        assert f"type=bind,source={ro.resolve()},target={ro.resolve()},readonly" in mounts
    for rw in (lay.workspace, lay.home, *lay.writable):
        assert f"type=bind,source={rw},target={rw}" in mounts
    assert f"type=bind,source={lay.tmp},target=/tmp" in mounts
    assert not any(str(tmp_path / "r") + "," in m for m in mounts)  # the rollout folder itself stays out
    assert cmd[-4:] == [IMAGE, "pi", "-p", "hi"]


def test_run_passes_env_by_name_and_closes_stdin(tmp_path, fake_docker):
    lay = layout(tmp_path)
    result = DockerSandbox(IMAGE).run(["sh", "-c", "exit 3"], lay, env={"OPENAI_API_KEY": "hrl-secret"}, timeout_s=30)
    assert (result.returncode, result.timed_out, result.isolation) == (3, False, "docker")
    (run,) = calls(fake_docker)
    assert run["argv"][0] == "run" and "hrl-secret" not in " ".join(run["argv"])
    assert run["env"]["OPENAI_API_KEY"] == "hrl-secret" and run["env"]["HOME"] == str(lay.home)
    assert run["stdin"] == "/dev/null"
    assert lay.workspace.is_dir() and lay.tmp.is_dir()


def test_wall_clock_limit_kills_the_named_container(tmp_path, fake_docker):
    lay = layout(tmp_path)
    result = DockerSandbox(IMAGE, kill_grace_s=5).run(["sleep", "300"], lay, env={}, timeout_s=1)
    assert result.timed_out and result.returncode == 137
    run, kill = calls(fake_docker)
    name = run["argv"][run["argv"].index("--name") + 1]
    assert name.startswith("harness-rl-") and kill["argv"] == ["kill", name]
    sleeper = int((fake_docker / f"{name}.pid").read_text())
    assert not psutil.pid_exists(sleeper) or psutil.Process(sleeper).status() == psutil.STATUS_ZOMBIE


def test_each_run_gets_its_own_name(tmp_path, fake_docker):
    sandbox = DockerSandbox(IMAGE)
    for i in range(2):
        sandbox.run(["true"], layout(tmp_path / str(i)), env={}, timeout_s=30)
    names = [c["argv"][c["argv"].index("--name") + 1] for c in calls(fake_docker)]
    assert len(set(names)) == 2


def test_missing_docker_client_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="docker client"):
        DockerSandbox(IMAGE).run(["true"], layout(tmp_path), env={}, timeout_s=5)


def test_terminate_all_kills_containers_in_flight(tmp_path, fake_docker):
    sandbox = DockerSandbox(IMAGE, kill_grace_s=5)
    results = []
    runner = threading.Thread(target=lambda: results.append(
        sandbox.run(["sleep", "300"], layout(tmp_path), env={}, timeout_s=300)))  # fmt: skip
    runner.start()
    while not list(fake_docker.glob("*.pid")):  # the container is up once the fake recorded its pid
        time.sleep(0.05)
    assert len(sandbox.terminate_all()) == 1
    runner.join(30)
    assert not runner.is_alive() and results[0].returncode == 137 and not results[0].timed_out
    assert [c["argv"][0] for c in calls(fake_docker)] == ["run", "kill"]
    with pytest.raises(SandboxClosedError):  # nothing starts after the shutdown
        sandbox.run(["true"], layout(tmp_path), env={}, timeout_s=5)
    assert [c["argv"][0] for c in calls(fake_docker)] == ["run", "kill"]


def test_terminate_under_kills_only_that_groups_containers(tmp_path, fake_docker):
    """A cancelled group's container is killed by name; another group's run goes on and new runs still start."""
    sandbox = DockerSandbox(IMAGE, kill_grace_s=5)
    results: dict[str, object] = {}

    def run(group: str) -> None:
        lay = SandboxLayout.for_rollout(tmp_path / group / "r0", readonly=(tmp_path / "tools",))
        results[group] = sandbox.run(["sleep", "300"], lay, env={}, timeout_s=300)

    runners = {group: threading.Thread(target=run, args=(group,)) for group in ("g0", "g1")}
    for runner in runners.values():
        runner.start()
    while len(list(fake_docker.glob("*.pid"))) < 2:
        time.sleep(0.05)
    assert len(sandbox.terminate_under(tmp_path / "g0")) == 1
    runners["g0"].join(30)
    assert "g0" in results and results["g0"].returncode == 137 and runners["g1"].is_alive()
    sandbox.run(["true"], SandboxLayout.for_rollout(tmp_path / "g2" / "r0"), env={}, timeout_s=30)
    assert [c["argv"][0] for c in calls(fake_docker)].count("kill") == 1
    sandbox.terminate_all()
    runners["g1"].join(30)
    assert not runners["g1"].is_alive()
