"""`python -m harness_rl.proxy serve --engine-url URL --port PORT [--host 127.0.0.1] [--base-model NAME]`.

The admin token comes from the environment variable HARNESS_RL_ADMIN_TOKEN (never a flag, so it stays
out of process listings). Prints the proxy URL once it listens; runs until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import threading

import httpx

from harness_rl.proxy.server import ProxyServer

TOKEN_ENV = "HARNESS_RL_ADMIN_TOKEN"


def engine_base_model(engine_url: str) -> str:
    """The engine's base model name: the /v1/models entry that is not a LoRA adapter (parent null)."""
    resp = httpx.get(engine_url.rstrip("/") + "/v1/models", timeout=10.0, trust_env=False)
    resp.raise_for_status()
    models = resp.json()["data"]
    for model in models:
        if not model.get("parent"):
            return model["id"]
    raise RuntimeError(f"engine at {engine_url} lists no base model: {models}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness_rl.proxy")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the capture proxy in front of a vLLM server")
    serve.add_argument("--engine-url", required=True, help="vLLM OpenAI server base URL")
    serve.add_argument("--port", type=int, required=True, help="port to bind (0 = pick a free one)")
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    serve.add_argument("--base-model", default=None, help="served base model name (default: ask the engine)")
    serve.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)

    token = os.environ.get(TOKEN_ENV)
    if not token:
        parser.error(f"set the admin token in the environment variable {TOKEN_ENV}")
    base_model = args.base_model or engine_base_model(args.engine_url)
    proxy = ProxyServer(
        args.engine_url,
        token,
        base_model=base_model,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    proxy.start()
    # Everything the server allocated while starting (modules, the app) lives as long as the process: out of
    # the collector's sight, its full collections only walk what the calls allocate (~8% less CPU per call at
    # 144 concurrent streams).
    gc.freeze()
    print(proxy.url, flush=True)
    try:
        stop.wait()
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
