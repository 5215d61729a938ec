"""Runs an ASGI app (the proxy, or a test double) with uvicorn in a background thread."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from harness_rl.proxy.app import create_app

KEEP_ALIVE_S = 75


class UvicornThread:
    """Serves `app` on host:port from a daemon thread; port 0 picks a free port.

    Attributes:
        url: http://host:port once started.
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        self.app = app
        self.host = host
        self.port = port
        # Clients' pools (httpx's default: 5 s) must drop an idle connection before the server does, or a
        # request sent on it as the server closes it fails; uvicorn's default keep-alive is 5 s too.
        # uvicorn picks httptools and uvloop when they are installed (they are, with vLLM). Per request it would
        # also run X-Forwarded-* handling (no client of this server is behind another proxy) and call the
        # access logger even when the log level drops its records; neither is needed.
        self._config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            lifespan="on",
            timeout_keep_alive=KEEP_ALIVE_S,
            proxy_headers=False,
            access_log=log_level in ("trace", "debug", "info"),
        )
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("server not started")
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> UvicornThread:
        """Starts serving and returns once the socket is bound.

        Raises:
            RuntimeError: if the server does not come up within timeout_s (e.g. the port is taken).
        """
        if self._thread is not None:
            raise RuntimeError("already started")
        self._server = uvicorn.Server(self._config)
        # uvicorn installs signal handlers only in the main thread, so a thread is safe here.
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Asks the server to exit and joins its thread (open streams get a grace period)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._thread = None

    def __enter__(self) -> UvicornThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ProxyServer(UvicornThread):
    """The capture proxy on loopback (by default) in a background thread.

    Example:
        with ProxyServer("http://127.0.0.1:8000", token, base_model="smollm2") as proxy:
            print(proxy.url)
    """

    def __init__(
        self,
        engine_url: str,
        admin_token: str,
        *,
        base_model: str,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        **app_kwargs: Any,
    ) -> None:
        app = create_app(engine_url, admin_token, base_model=base_model, **app_kwargs)
        super().__init__(app, host=host, port=port, log_level=log_level)
        self.sessions = app.state.sessions
