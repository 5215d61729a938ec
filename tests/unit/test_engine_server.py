"""The engine runner builds vLLM's command line and stops exactly its own process group, even when it resists."""

from __future__ import annotations

import os
import sys
import time

import pytest

from harness_rl.engine.server import EngineStartError, VLLMServer

# A stand-in server process: it ignores SIGTERM, forks a child into its process group and never serves
# /health, like a wedged engine. Only process handling is exercised here; tests/integration runs real vLLM.
STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = os.fork()
if child == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
    os._exit(0)
print("child", child, flush=True)
time.sleep(600)
"""


def make_server(tmp_path, **kwargs) -> VLLMServer:
    defaults = dict(served_model_name="base", max_lora_rank=8, max_loras=2, log_path=tmp_path / "engine.log")
    return VLLMServer("/models/m", **{**defaults, **kwargs})


def gone(pid: int) -> bool:
    """True when the process no longer runs (a zombie waiting for init to reap it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_command_line_has_lora_and_tool_flags(tmp_path):
    server = make_server(
        tmp_path,
        port=8123,
        tool_parser="hermes",
        chat_template="/t.jinja",
        max_cpu_loras=6,
        dtype="float32",
        logprobs_mode="processed_logprobs",
        extra_args=["--enforce-eager"],
    )
    cmd = server.command()
    assert cmd[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for flag in [
        "--model /models/m",
        "--served-model-name base",
        "--host 127.0.0.1",
        "--port 8123",
        "--enable-lora",
        "--max-lora-rank 8",
        "--max-loras 2",
        "--max-cpu-loras 6",
        "--dtype float32",
        "--enable-auto-tool-choice",
        "--tool-call-parser hermes",
        "--chat-template /t.jinja",
        "--logprobs-mode processed_logprobs",
    ]:
        assert flag in joined
    assert cmd[-1] == "--enforce-eager"
    assert server.url == "http://127.0.0.1:8123"


def test_environment_enables_runtime_lora_and_cpu_kv_cache(tmp_path):
    env = make_server(tmp_path, device="cpu", kv_cache_gib=1.5).environment()
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1.5"
    monkeypatch_env = make_server(tmp_path, device="cuda").environment()
    assert monkeypatch_env.get("VLLM_CPU_KVCACHE_SPACE") == os.environ.get("VLLM_CPU_KVCACHE_SPACE")


def test_engine_samples_with_vllm_defaults_not_the_models_generation_config(tmp_path):
    # The model's generation_config.json (top_k, min_p, repetition_penalty) must not shape what is sampled;
    # tests/integration/test_sampling_fidelity.py shows the recorded log-probs drift without this flag.
    cmd = " ".join(make_server(tmp_path, port=1).command())
    assert "--generation-config vllm" in cmd
    assert "--generation-config" not in make_server(tmp_path, port=1, generation_config=None).command()


def test_gpu_flags_only_on_cuda(tmp_path):
    gpu = make_server(tmp_path, port=1, device="cuda", gpu_memory_utilization=0.8, tensor_parallel_size=2)
    assert "--gpu-memory-utilization 0.8 --tensor-parallel-size 2" in " ".join(gpu.command())
    single = make_server(tmp_path, port=1, device="cuda", gpu_memory_utilization=0.8)
    assert "--tensor-parallel-size" not in single.command()
    cpu = make_server(tmp_path, port=1, device="cpu", gpu_memory_utilization=0.8, tensor_parallel_size=2)
    assert "--gpu-memory-utilization" not in cpu.command() and "--tensor-parallel-size" not in cpu.command()


def test_no_tool_flags_without_parser(tmp_path):
    assert "--enable-auto-tool-choice" not in make_server(tmp_path, port=1).command()


def test_exit_during_startup_raises_with_log_tail(tmp_path, monkeypatch):
    server = make_server(tmp_path)
    script = "import sys\nfor i in range(50): print('line', i)\nsys.exit(3)"
    monkeypatch.setattr(server, "command", lambda: [sys.executable, "-c", script])
    with pytest.raises(EngineStartError, match="exited with code 3") as err:
        server.start()
    assert "line 49" in err.value.log_tail and "line 19" not in err.value.log_tail  # last ~30 lines only
    assert gone(server.pid)


def test_timeout_stops_the_whole_group_even_if_it_ignores_sigterm(tmp_path, monkeypatch):
    # 5 s: the stub must have started and forked before the timeout even on a loaded machine (at load ~20 a
    # Python start-up alone took over 2 s and the test found no child to check).
    server = make_server(tmp_path, startup_timeout_s=5, stop_grace_s=1)
    monkeypatch.setattr(server, "command", lambda: [sys.executable, "-c", STUBBORN])
    t0 = time.monotonic()
    with pytest.raises(EngineStartError, match="not healthy after 5 s"):
        server.start()
    assert time.monotonic() - t0 < 20
    child = int((tmp_path / "engine.log").read_text().split("child", 1)[1].split()[0])
    assert server.pid is not None and server.pid != child
    assert gone(server.pid) and gone(child)
    server.stop()  # idempotent


def test_stop_after_healthy_start(tmp_path, monkeypatch):
    server = make_server(tmp_path, port=None, stop_grace_s=5)
    # A real HTTP server answering /health stands in for vLLM.
    serve = (
        "import http.server, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers()\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
    )
    monkeypatch.setattr(server, "command", lambda: [sys.executable, "-c", serve, str(server.port)])
    with server:
        assert server.is_running() and server.startup_seconds is not None
        pid = server.pid
    assert gone(pid)
    assert not server.is_running()
