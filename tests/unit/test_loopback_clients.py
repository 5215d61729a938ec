"""Clients of loopback services (engine, capture proxy) ignore proxy environment variables: an HTTP(S)_PROXY or
ALL_PROXY in the user's environment must not route the engine's admin calls or the proxy's admin token off the
machine (here: to an unreachable proxy, which would make every call fail)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness_rl.engine.client import EngineClient
from harness_rl.rollout.proxy_admin import ProxyAdmin

#: Nothing listens on the discard port of this loopback address, so a call sent through it fails at once.
UNREACHABLE_PROXY = "http://127.0.0.9:9"


class _Handler(BaseHTTPRequestHandler):
    """Answers every GET and POST with a fixed JSON body, and remembers the paths asked for."""

    seen: list[str] = []

    def _answer(self) -> None:
        self.seen.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = json.dumps({"data": [{"id": "base"}], "trace": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy_env(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, UNREACHABLE_PROXY)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_engine_client_reaches_a_local_server_despite_proxy_variables(local_server, proxy_env):
    _Handler.seen = []
    with EngineClient(local_server, timeout_s=10) as client:
        assert client.health()
        assert client.models() == ["base"]
        client.unload_adapter("a")
    assert _Handler.seen == ["/health", "/v1/models", "/v1/unload_lora_adapter"]


def test_proxy_admin_reaches_a_local_server_despite_proxy_variables(local_server, proxy_env):
    _Handler.seen = []
    admin = ProxyAdmin(local_server, "token", timeout_s=10)
    try:
        assert admin.trace("k")["trace"] == "ok"
    finally:
        admin.close()
    assert _Handler.seen and _Handler.seen[0].startswith("/")
