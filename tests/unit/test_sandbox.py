"""The local sandbox caps address space, kills the whole process tree at the time limit leaving no
orphan, and under bubblewrap lets a process write only inside its workspace, home and tmp."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from harness_rl.sandbox import LocalSandbox, SandboxClosedError, SandboxLayout, base_env, bwrap_usable
from tests.processes import DescendantWatcher

MODES = [
    pytest.param(False, id="plain"),
    pytest.param(
        True,
        id="bwrap",
        marks=pytest.mark.skipif(not bwrap_usable(), reason="bwrap missing or unusable (apt-get install bubblewrap)"),
    ),
]


def test_command_construction_without_bwrap(tmp_path):
    layout = SandboxLayout.for_rollout(tmp_path / "r")
    cmd = LocalSandbox(use_bwrap=False, address_space_bytes=1 << 30).command(["mini", "-t", "x"], layout)
    assert cmd[-3:] == ["mini", "-t", "x"]
    assert "bwrap" not in cmd
    assert cmd[:3] == ["prlimit", f"--as={1 << 30}", "--"] or str(1 << 30) in cmd
    assert LocalSandbox(use_bwrap=False, address_space_bytes=None).command(["a"], layout) == ["a"]


def test_niceness_prefixes_the_command(tmp_path):
    layout = SandboxLayout.for_rollout(tmp_path / "r")
    cmd = LocalSandbox(use_bwrap=False, niceness=10).command(["true"], layout)
    assert cmd[:3] == ["nice", "-n", "10"] and cmd[-1] == "true"
    assert LocalSandbox(use_bwrap=False).command(["true"], layout)[0] != "nice"


def test_bwrap_command_layout_order(tmp_path, monkeypatch):
    import harness_rl.sandbox.local as local

    monkeypatch.setattr(local, "bwrap_usable", lambda: True)
    run_dir = tmp_path / "run"
    layout = SandboxLayout.for_rollout(run_dir / "r1", readonly=(tmp_path / "tools",))
    sb = LocalSandbox(use_bwrap=True, hidden_paths=[run_dir], address_space_bytes=None)
    cmd = sb.command(["mini"], layout)
    assert cmd[0] == "bwrap" and cmd[-2:] == ["--", "mini"]
    joined = " ".join(cmd)
    r1 = run_dir.resolve() / "r1"
    # order matters: /tmp, then tmpfs over hidden folders (parents first), then ro binds, then writable binds
    positions = [
        joined.index("--ro-bind / /"),
        joined.index(f"--bind {r1 / 'tmp'} /tmp"),
        joined.index(f"--tmpfs {run_dir.resolve()} "),
        joined.index(f"--tmpfs {r1} "),
        joined.index(f"--ro-bind {(tmp_path / 'tools').resolve()}"),
        joined.index(f"--bind {r1 / 'workspace'} {r1 / 'workspace'}"),
    ]
    assert positions == sorted(positions)
    for flag in ("--unshare-pid", "--die-with-parent", "--new-session", f"--chdir {r1 / 'workspace'}"):
        assert flag in joined
    assert "--unshare-net" not in joined  # the proxy is on the host's loopback


@pytest.mark.parametrize("use_bwrap", MODES)
def test_address_space_cap_stops_a_memory_hog_quickly(tmp_path, use_bwrap):
    layout = SandboxLayout.for_rollout(tmp_path / "r")
    hog = "x = []\nwhile True:\n    x.append(bytearray(16 << 20))"
    out = tmp_path / "out.log"
    sb = LocalSandbox(use_bwrap=use_bwrap, address_space_bytes=512 << 20)
    with open(out, "wb") as f:
        result = sb.run([sys.executable, "-c", hog], layout, env=base_env(), timeout_s=60, stdout=f, stderr=f)
    assert result.returncode != 0 and not result.timed_out
    assert result.seconds < 15
    assert "MemoryError" in out.read_text()


@pytest.mark.parametrize("use_bwrap", MODES)
def test_timeout_kills_process_group_and_detached_children(tmp_path, use_bwrap):
    layout = SandboxLayout.for_rollout(tmp_path / "r")
    # a child in the group, one in its own session (as mini runs commands), and a parent ignoring SIGTERM
    script = "trap '' TERM; sleep 300 & setsid sleep 301 & while true; do sleep 1; done"
    sb = LocalSandbox(use_bwrap=use_bwrap, kill_grace_s=1)
    start = time.monotonic()
    with DescendantWatcher() as watcher:
        result = sb.run(["sh", "-c", script], layout, env=base_env(), timeout_s=1.5)
    assert result.timed_out
    assert time.monotonic() - start < 10
    assert len(watcher.pids) >= 3, watcher.pids
    assert watcher.alive() == []


@pytest.mark.parametrize("use_bwrap", MODES)
def test_terminate_all_stops_runs_in_flight_at_once(tmp_path, use_bwrap):
    """On shutdown (Ctrl-C, an error) runs in other threads stop now, not at their wall-clock limit."""
    sb = LocalSandbox(use_bwrap=use_bwrap, kill_grace_s=1)
    results = []

    def run(i):
        layout = SandboxLayout.for_rollout(tmp_path / f"r{i}")
        results.append(sb.run(["sh", "-c", "setsid sleep 303 & sleep 300"], layout, env=base_env(), timeout_s=120))

    with DescendantWatcher() as watcher:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while len(sb._live) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # let the detached sleeps start
        start = time.monotonic()
        stopped = sb.terminate_all()
        for t in threads:
            t.join(timeout=15)
    assert len(stopped) == 2
    assert time.monotonic() - start < 10
    assert len(results) == 2
    assert watcher.alive() == []
    # A rollout thread that only now reaches its harness start must not start one after the shutdown (it
    # would run to its wall-clock limit while the run waits for it).
    with pytest.raises(SandboxClosedError):
        sb.run(["sleep", "300"], SandboxLayout.for_rollout(tmp_path / "late"), env=base_env(), timeout_s=120)
    assert sb._live == {}


@pytest.mark.parametrize("use_bwrap", MODES)
def test_terminate_under_stops_one_groups_runs_only(tmp_path, use_bwrap):
    """A cancelled group's runs (and what they detached) stop; another group's run goes on, later runs start."""
    sb = LocalSandbox(use_bwrap=use_bwrap, kill_grace_s=1)
    results: dict[str, object] = {}

    def run(group: str) -> None:
        layout = SandboxLayout.for_rollout(tmp_path / group / "r0")
        cmd = ["sh", "-c", "setsid sleep 303 & sleep 300"]
        results[group] = sb.run(cmd, layout, env=base_env(), timeout_s=120)

    threads = {group: threading.Thread(target=run, args=(group,)) for group in ("g0", "g1")}
    for t in threads.values():
        t.start()
    deadline = time.monotonic() + 10
    while len(sb._live) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # let the detached sleeps start
    stopped = sb.terminate_under(tmp_path / "g0")
    threads["g0"].join(timeout=15)
    assert len(stopped) == 1 and "g0" in results and "g1" not in results
    assert threads["g1"].is_alive()
    quick = sb.run(["true"], SandboxLayout.for_rollout(tmp_path / "g2" / "r0"), env=base_env(), timeout_s=30)
    assert quick.returncode == 0  # the sandbox is not closed
    sb.terminate_all()
    threads["g1"].join(timeout=15)
    assert sb._live == {}


@pytest.mark.parametrize("use_bwrap", MODES)
def test_leftover_background_process_is_killed_after_normal_exit(tmp_path, use_bwrap):
    layout = SandboxLayout.for_rollout(tmp_path / "r")
    with DescendantWatcher() as watcher:
        result = LocalSandbox(use_bwrap=use_bwrap).run(
            ["sh", "-c", "setsid sleep 302 & sleep 0.3; echo done"], layout, env=base_env(), timeout_s=20
        )
    assert result.returncode == 0 and not result.timed_out
    assert watcher.alive() == []


def test_plain_mode_runs_in_workspace_with_private_home_and_tmp(tmp_path):
    layout = SandboxLayout.for_rollout(tmp_path / "r")
    out = tmp_path / "out.log"
    with open(out, "wb") as f:
        LocalSandbox(use_bwrap=False).run(
            ["sh", "-c", "pwd; echo $HOME; echo $TMPDIR"], layout, env=base_env(), timeout_s=10, stdout=f
        )
    assert out.read_text().split() == [str(layout.workspace), str(layout.home), str(layout.tmp)]


@pytest.fixture(params=["under_tmp", "outside_tmp"])
def run_dir(request, tmp_path):
    """A run folder under /tmp (hidden by the private /tmp) and one outside it (hidden only by the tmpfs)."""
    if request.param == "under_tmp":
        yield tmp_path / "run"
        return
    base = Path(tempfile.mkdtemp(prefix="harness_rl_sandbox_test_", dir="/var/tmp"))
    yield base / "run"
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(not bwrap_usable(), reason="bwrap missing or unusable (apt-get install bubblewrap)")
def test_bwrap_writes_only_inside_workspace_home_and_tmp(tmp_path, run_dir):
    rollout = run_dir / "r1"
    sibling = run_dir / "r0"
    sibling.mkdir(parents=True)
    (sibling / "answer.txt").write_text("secret")
    rollout.mkdir()
    (rollout / "verifier.py").write_text("secret")
    repo_probe = Path(__file__).resolve().parent / "zz_sandbox_escape_probe"
    layout = SandboxLayout.for_rollout(rollout)
    script = f"""
        echo ws > inside.txt
        echo home > "$HOME/h.txt"
        echo tmp > /tmp/t.txt
        touch {repo_probe} 2>/dev/null && echo WROTE_REPO
        cat {sibling / "answer.txt"} 2>/dev/null && echo SAW_SIBLING
        cat {rollout / "verifier.py"} 2>/dev/null && echo SAW_VERIFIER
        ls /proc | grep -c '^[0-9]' > procs.txt
        true
    """
    out = tmp_path / "out.log"
    sb = LocalSandbox(use_bwrap=True, hidden_paths=[run_dir])
    with open(out, "wb") as f:
        result = sb.run(["sh", "-c", script], layout, env=base_env(), timeout_s=20, stdout=f, stderr=f)
    log = out.read_text()
    assert result.returncode == 0 and result.isolation == "bwrap", log
    assert (layout.workspace / "inside.txt").read_text() == "ws\n"
    assert (layout.home / "h.txt").read_text() == "home\n"
    assert (layout.tmp / "t.txt").read_text() == "tmp\n"
    assert not repo_probe.exists()
    for leak in ("WROTE_REPO", "SAW_SIBLING", "SAW_VERIFIER"):
        assert leak not in log
    assert int((layout.workspace / "procs.txt").read_text()) < 10  # own PID namespace
    assert (sibling / "answer.txt").read_text() == "secret"


def test_requiring_bwrap_when_missing_fails_loudly(monkeypatch):
    import harness_rl.sandbox.local as local

    monkeypatch.setattr(local, "bwrap_usable", lambda: False)
    with pytest.raises(RuntimeError, match="bubblewrap"):
        LocalSandbox(use_bwrap=True)
    assert LocalSandbox().isolation == "none"


def test_base_env_does_not_leak_our_environment(monkeypatch):
    monkeypatch.setenv("HARNESS_RL_ADMIN_TOKEN", "secret")
    env = base_env({"X": "1"})
    assert "HARNESS_RL_ADMIN_TOKEN" not in env and env["X"] == "1" and "PATH" in env
    assert subprocess.run(["true"], env=env).returncode == 0
