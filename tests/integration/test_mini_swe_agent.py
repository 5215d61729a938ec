"""The real mini-swe-agent 2.4.6 binary, installed idempotently, solves a scripted task against a fake
OpenAI-chat upstream and ends "submitted"; a hanging or dead upstream is bounded by the wall-clock limit and
leaves no process behind."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest

from harness_rl.envs import lay_out_workspace, verify
from harness_rl.envs.smoke import smoke_task
from harness_rl.harnesses import HarnessNotInstalledError, MiniSweAgent
from harness_rl.harnesses.install import STAMP_NAME, venv_dir
from tests.processes import DescendantWatcher

pytestmark = [pytest.mark.slow, pytest.mark.harness]


class FakeUpstream:
    """A scripted non-streaming OpenAI chat server on 127.0.0.1 (replies in order; the last one repeats)."""

    def __init__(self, replies: list[str], *, hang: bool = False) -> None:
        self.replies, self.hang, self.requests = replies, hang, []
        self._release = threading.Event()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                upstream.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                if upstream.hang:
                    upstream._release.wait(120)
                    return
                text = upstream.replies[min(len(upstream.requests), len(upstream.replies)) - 1]
                payload = json.dumps(
                    {
                        "id": f"chatcmpl-{len(upstream.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "m"),
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text},
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeUpstream:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def mini() -> Iterator[MiniSweAgent]:
    harness = MiniSweAgent()
    start = time.monotonic()
    harness.install()
    first = time.monotonic() - start
    stamp = venv_dir(harness._spec) / STAMP_NAME
    mtime = stamp.stat().st_mtime_ns
    start = time.monotonic()
    harness.install()  # idempotent: the stamp is there, nothing is rebuilt
    assert time.monotonic() - start < 2, f"second install took {time.monotonic() - start:.1f} s (first {first:.1f} s)"
    assert stamp.stat().st_mtime_ns == mtime
    assert harness.is_installed() and harness.version() == "2.4.6"
    yield harness


def test_scripted_upstream_solves_smoke_task_and_submits(mini, tmp_path):
    task = smoke_task("t", "out.txt", "apple")
    rollout = tmp_path / "rollout"
    workspace = lay_out_workspace(task, rollout / "workspace")
    replies = [
        "I will create it.\n```bash\necho apple > out.txt\n```\nand then\n```bash\nrm -rf ./*\n```",
        "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
    ]
    with FakeUpstream(replies) as up, DescendantWatcher() as watcher:
        outcome = mini.run(workspace, task.instruction, base_url=up.url, api_key="rollout-key-1",
                           step_limit=5, timeout_s=120, rollout_dir=rollout)  # fmt: skip
    assert outcome.exit_kind == "submitted", outcome
    assert outcome.exit_status == "Submitted" and outcome.returncode == 0 and not outcome.timed_out
    assert outcome.n_turns == 2 and outcome.n_tool_calls == 2
    assert verify(task, workspace).score == 1.0  # only the FIRST ```bash block ran
    assert [r["path"] for r in up.requests] == ["/v1/chat/completions"] * 2
    assert all(r["auth"] == "Bearer rollout-key-1" for r in up.requests)
    assert "tools" not in up.requests[0] and "stream" not in up.requests[0]
    assert "Create a file named out.txt that contains the word apple." in up.requests[0]["messages"][1]["content"]
    assert "<returncode>0</returncode>" in up.requests[1]["messages"][-1]["content"]
    assert watcher.alive() == []


def test_step_limit_ends_with_limits_exceeded(mini, tmp_path):
    with FakeUpstream(["```bash\nls\n```"]) as up:
        outcome = mini.run(tmp_path / "ws", "List files.", base_url=up.url, api_key="k", step_limit=3,
                           timeout_s=120, rollout_dir=tmp_path)  # fmt: skip
    assert outcome.exit_kind == "limits_exceeded" and outcome.n_turns == 3 and len(up.requests) == 3


def test_prose_replies_end_with_format_error(mini, tmp_path):
    with FakeUpstream(["I think the answer is a file."]) as up:
        outcome = mini.run(tmp_path / "ws", "Do it.", base_url=up.url, api_key="k", step_limit=10,
                           timeout_s=120, rollout_dir=tmp_path)  # fmt: skip
    assert outcome.exit_kind == "format_error" and outcome.n_tool_calls == 0 and len(up.requests) == 3


def test_tool_mode_sends_the_bash_tool(mini, tmp_path):
    harness = MiniSweAgent(mode="tool")
    with FakeUpstream(["no tool call"]) as up:
        outcome = harness.run(tmp_path / "ws", "Do it.", base_url=up.url, api_key="k", step_limit=1,
                              timeout_s=120, rollout_dir=tmp_path)  # fmt: skip
    assert up.requests[0]["tools"][0]["function"]["name"] == "bash"
    assert outcome.exit_kind in ("format_error", "limits_exceeded")


def test_hanging_upstream_is_killed_at_the_limit_without_orphans(mini, tmp_path):
    with FakeUpstream([], hang=True) as up, DescendantWatcher() as watcher:
        start = time.monotonic()
        outcome = mini.run(tmp_path / "ws", "Do it.", base_url=up.url, api_key="k", step_limit=5,
                           timeout_s=8, rollout_dir=tmp_path)  # fmt: skip
        elapsed = time.monotonic() - start
        assert len(up.requests) == 1
    assert outcome.exit_kind == "timeout" and outcome.timed_out
    assert 8 <= elapsed < 8 + 10
    assert watcher.pids and watcher.alive() == []


def test_runaway_command_output_is_capped_and_killed_at_the_limit(mini, tmp_path):
    # The DESIGN incident: a sampled `yes` grew mini to ~20 GB. Under the address-space cap mini gets a
    # MemoryError (and then stalls: a thread of it died), so the wall-clock limit ends the run.
    replies = ["```bash\nyes\n```", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"]
    peak = 0
    with FakeUpstream(replies) as up, DescendantWatcher() as watcher:
        done = threading.Event()

        def sample_rss() -> None:
            nonlocal peak
            while not done.is_set():
                total = 0
                for p in psutil.Process().children(recursive=True):
                    if p.pid in watcher.preexisting:  # e.g. the session's vLLM engine
                        continue
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                peak = max(peak, total)
                time.sleep(0.1)

        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        outcome = mini.run(tmp_path / "ws", "Do it.", base_url=up.url, api_key="k", step_limit=4,
                           timeout_s=20, rollout_dir=tmp_path)  # fmt: skip
        done.set()
        sampler.join()
    # How mini itself ends depends on where the MemoryError hits (a stalled thread -> our timeout; a
    # failed request carrying the huge output -> its own error exit); what must hold is the bound on
    # time and memory, and that nothing survives.
    assert outcome.exit_kind in ("timeout", "submitted", "error")
    assert outcome.seconds < 20 + 10
    assert peak < mini.sandbox.address_space_bytes + (512 << 20)
    assert watcher.alive() == []


def test_dead_endpoint_ends_within_the_limit(mini, tmp_path):
    with DescendantWatcher() as watcher:
        start = time.monotonic()
        outcome = mini.run(tmp_path / "ws", "Do it.", base_url="http://127.0.0.1:9/v1", api_key="k",
                           step_limit=5, timeout_s=60, rollout_dir=tmp_path)  # fmt: skip
        elapsed = time.monotonic() - start
    # mini's default (10 attempts, 4-60 s backoff) takes minutes; ours gives up on its own in ~15-20 s
    assert elapsed < 60
    assert outcome.exit_kind in ("error", "timeout")
    if outcome.exit_kind == "error":
        assert "Connection" in outcome.error
    assert watcher.alive() == []


def test_missing_binary_names_the_install_command(tmp_path):
    harness = MiniSweAgent(tools=tmp_path / "no-tools")
    assert not harness.is_installed()
    with pytest.raises(HarnessNotInstalledError, match="python -m harness_rl.harnesses install mini_swe_agent"):
        harness.run(tmp_path / "ws", "x", base_url="http://127.0.0.1:9/v1", api_key="k", step_limit=1,
                    timeout_s=5, rollout_dir=tmp_path / "r")  # fmt: skip
