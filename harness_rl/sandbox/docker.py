"""Run a harness in a docker container: the ContainerSandbox implementation for cluster nodes.

One ``docker run --rm`` per rollout. The container sees:

    --mount <path>,readonly          the project checkout, the running interpreter's prefix and the layout's
                                     read-only folders (harness venvs, the npm prefix), at their host paths
    --mount <path>                   workspace, home and harness output folders, writable, at their host paths
    --mount <tmp> -> /tmp            the rollout's own /tmp
    --read-only                      the image's root filesystem (the "read-only system")
    --network host                   the capture proxy listens on the host's loopback, so the container must
                                     share the host's network namespace to reach 127.0.0.1
    --memory N --memory-swap N       a cgroup memory cap instead of RLIMIT_AS (Node/Bun reserve far more
                                     address space than they use, and the cgroup counts what they use)
    --user uid:gid                   files written to the workspace stay ours
    --init, --cap-drop ALL, --security-opt no-new-privileges, --pids-limit
    --name <unique>                  at the wall-clock limit the sandbox runs ``docker kill <that name>``:
                                     killing the docker client alone would leave the container running

stdin is closed (no ``-i``), so a harness waiting for input sees EOF. Environment values are passed as
``--env NAME`` with the value in the docker client's own environment, so no value (the session key) appears
on a command line that ``ps`` shows.

The image must contain the interpreters that the project's tools point to (the harness venvs' base Python,
Node for the npm harnesses) at the same paths as the host; the tools folder and checkout are mounted from the
host. This module is tested here only against a fake ``docker`` executable that records its arguments; it has
not been run against a real docker daemon on this machine.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from harness_rl.sandbox.base import ProcessResult, SandboxClosedError, SandboxLayout

logger = logging.getLogger(__name__)

#: Variables the docker client itself may need to find its daemon; passed through from our environment.
DOCKER_CLIENT_ENV = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY")


class DockerSandbox:
    """Runs each process in a fresh docker container.

    Args:
        image: The container image (it must provide the interpreters the installed harnesses use).
        memory_bytes: Cgroup memory cap of the container (``--memory``; swap is capped to the same).
        readonly_paths: Host folders mounted read-only at the same path besides the layout's own read-only
            folders (default: the project checkout and the running interpreter's prefix).
        docker: The docker client executable (looked up on PATH when the run starts).
        cpus: ``--cpus`` of the container (None: no cap).
        pids_limit: ``--pids-limit`` (a fork bomb stops there).
        kill_grace_s: Seconds to wait for the client to exit after ``docker kill`` before killing it too.
        read_only_root: Mount the image's root filesystem read-only.
    """

    def __init__(
        self,
        image: str,
        *,
        memory_bytes: int = 8 << 30,
        readonly_paths: Sequence[Path] | None = None,
        docker: str = "docker",
        cpus: float | None = None,
        pids_limit: int = 4096,
        kill_grace_s: float = 10.0,
        read_only_root: bool = True,
    ) -> None:
        self.image = image
        self.memory_bytes = memory_bytes
        if readonly_paths is None:
            readonly_paths = (Path(__file__).resolve().parents[2], Path(sys.prefix), Path(sys.base_prefix))
        self.readonly_paths = tuple(sorted({Path(p).resolve() for p in readonly_paths}))
        self.docker = docker
        self.cpus = cpus
        self.pids_limit = pids_limit
        self.kill_grace_s = kill_grace_s
        self.read_only_root = read_only_root
        # container name -> (docker client process, the run's layout)
        self._live: dict[str, tuple[subprocess.Popen, SandboxLayout]] = {}
        self._live_lock = threading.Lock()
        self._closed = False

    @property
    def isolation(self) -> str:
        """``"docker"``."""
        return "docker"

    def container_name(self) -> str:
        """See ``ContainerSandbox.container_name``."""
        return f"harness-rl-{uuid.uuid4().hex[:16]}"

    def command(
        self,
        argv: Sequence[str],
        layout: SandboxLayout,
        *,
        name: str | None = None,
        env_names: Sequence[str] = (),
    ) -> list[str]:
        """The ``docker run`` command line for ``argv``.

        Args:
            argv: The harness command, run inside the container.
            layout: The rollout's folders.
            name: The container name (default: a fresh one).
            env_names: Environment variables to pass in (``--env NAME``; values come from the client's env).
        """
        uid, gid = os.getuid(), os.getgid()
        cmd = [self.docker, "run", "--rm", "--name", name or self.container_name(), "--network", "host"]
        cmd += ["--memory", str(self.memory_bytes), "--memory-swap", str(self.memory_bytes)]
        cmd += ["--pids-limit", str(self.pids_limit), "--user", f"{uid}:{gid}", "--init"]
        cmd += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        if self.cpus is not None:
            cmd += ["--cpus", f"{self.cpus:g}"]
        if self.read_only_root:
            cmd.append("--read-only")
        writable = sorted({layout.workspace, layout.home, *layout.writable})
        readonly = sorted({*self.readonly_paths, *layout.readonly} - set(writable))
        for path in readonly:
            cmd += ["--mount", f"type=bind,source={path},target={path},readonly"]
        cmd += ["--mount", f"type=bind,source={layout.tmp},target=/tmp"]
        for path in writable:
            cmd += ["--mount", f"type=bind,source={path},target={path}"]
        for key in env_names:
            cmd += ["--env", key]
        cmd += ["--workdir", str(layout.workspace), self.image]
        return cmd + list(argv)

    def run(
        self,
        argv: Sequence[str],
        layout: SandboxLayout,
        *,
        env: Mapping[str, str],
        timeout_s: float,
        stdout: IO[bytes] | None = None,
        stderr: IO[bytes] | None = None,
    ) -> ProcessResult:
        """Run ``argv`` in a container; see ``Sandbox.run``. At the limit the container is killed by name.

        Raises:
            RuntimeError: The docker client is not on PATH.
        """
        docker = shutil.which(self.docker)
        if docker is None:
            raise RuntimeError(f"{self.docker!r} not found on PATH: the docker sandbox needs the docker client")
        layout.create()
        inner_env = {**env, "HOME": str(layout.home), "TMPDIR": "/tmp"}
        client_env = {k: os.environ[k] for k in DOCKER_CLIENT_ENV if k in os.environ}
        client_env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
        client_env.update(inner_env)
        name = self.container_name()
        cmd = self.command(argv, layout, name=name, env_names=sorted(inner_env))
        start = time.monotonic()
        with self._live_lock:  # see LocalSandbox.run: nothing starts once terminate_all has run
            if self._closed:
                raise SandboxClosedError("the sandbox is shut down (terminate_all ran); no new run is started")
            proc = subprocess.Popen(
                [docker, *cmd[1:]],
                env=client_env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
            self._live[name] = (proc, layout)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._stop(name, proc)
        finally:
            with self._live_lock:
                self._live.pop(name, None)
        returncode = proc.wait()
        return ProcessResult(returncode, timed_out, time.monotonic() - start, self.isolation)

    def kill(self, name: str) -> None:
        """See ``ContainerSandbox.kill``. A container that is already gone is not an error."""
        docker = shutil.which(self.docker) or self.docker
        try:
            done = subprocess.run(
                [docker, "kill", name], stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            logger.warning("docker kill %s failed: %s", name, err)
            return
        if done.returncode != 0:
            logger.info("docker kill %s: %s", name, done.stderr.decode(errors="replace").strip())

    def terminate_all(self) -> list[int]:
        """Kill every container in flight; called on shutdown (later runs raise SandboxClosedError). Returns the
        docker clients' PIDs."""
        with self._live_lock:
            self._closed = True
            live = [(name, proc) for name, (proc, _) in self._live.items()]
        for name, proc in live:
            self._stop(name, proc)
        return [proc.pid for _, proc in live]

    def terminate_under(self, folder: Path) -> list[int]:
        """Kill the containers of the runs whose rollout folder lies inside ``folder`` (one cancelled group);
        other runs go on. Returns the docker clients' PIDs."""
        folder = Path(folder).resolve()
        with self._live_lock:
            live = [
                (name, proc)
                for name, (proc, layout) in self._live.items()
                if layout.home.resolve().is_relative_to(folder)
            ]
        for name, proc in live:
            self._stop(name, proc)
        return [proc.pid for _, proc in live]

    def _stop(self, name: str, proc: subprocess.Popen) -> None:
        """``docker kill`` the container, then make sure the client is gone too (it exits once the container does)."""
        self.kill(name)
        try:
            proc.wait(timeout=self.kill_grace_s)
        except subprocess.TimeoutExpired:
            logger.warning("docker client for %s still running after docker kill; killing the client", name)
            proc.kill()
            proc.wait()
