"""`python -m harness_rl.engine serve --model smollm2-135m [--port P]`: run the engine until Ctrl-C.

The argument parsing lives in `parse_serve_args` only, so a Hydra entry point can replace it by building a
`VLLMServer` from a composed config and calling `serve()`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from harness_rl.engine.server import EngineStartError, VLLMServer


def parse_serve_args(argv: list[str] | None = None) -> VLLMServer:
    """Build the server from plain command-line flags (the stand-in for Hydra overrides).

    Flags it does not know are passed on to vLLM verbatim.
    """
    parser = argparse.ArgumentParser(prog="python -m harness_rl.engine")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_p = sub.add_parser("serve", help="start vLLM with LoRA serving and print its URL when ready")
    serve_p.add_argument("--model", default="smollm2-135m", help="embedded model name, model dir or hub id")
    serve_p.add_argument("--served-model-name", default=None, help="name for the base model (default: --model)")
    serve_p.add_argument("--host", default="127.0.0.1")
    serve_p.add_argument("--port", type=int, default=None)
    serve_p.add_argument("--dtype", default="auto")
    serve_p.add_argument("--max-model-len", type=int, default=4096)
    serve_p.add_argument("--max-lora-rank", type=int, default=16)
    serve_p.add_argument("--max-loras", type=int, default=4)
    serve_p.add_argument("--kv-cache-gib", type=float, default=2)
    serve_p.add_argument("--log-path", type=Path, default=None)
    serve_p.add_argument("--startup-timeout-s", type=float, default=300)
    args, extra = parser.parse_known_args(argv)
    return build_server(args, extra)


def build_server(args: argparse.Namespace, extra_args: list[str]) -> VLLMServer:
    """Resolve the model reference and fill in the embedded model's tool parser and chat template."""
    from harness_rl.models.fetch import resolve_model_path
    from harness_rl.models.registry import EMBEDDED_MODELS

    spec = EMBEDDED_MODELS.get(args.model)
    return VLLMServer(
        resolve_model_path(args.model),
        served_model_name=args.served_model_name or args.model,
        host=args.host,
        port=args.port,
        max_lora_rank=args.max_lora_rank,
        max_loras=args.max_loras,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        tool_parser=spec.tool_parser if spec else None,
        chat_template=spec.chat_template if spec else None,
        kv_cache_gib=args.kv_cache_gib,
        extra_args=extra_args,
        log_path=args.log_path,
        startup_timeout_s=args.startup_timeout_s,
    )


def serve(server: VLLMServer) -> int:
    """Start the server, print its URL, and block until Ctrl-C/SIGTERM or until the engine dies."""
    stop = threading.Event()
    # SIGTERM would otherwise end Python without atexit handlers and orphan the engine's process group.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        server.start()
    except EngineStartError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(server.url, flush=True)
    try:
        while not stop.wait(1.0):
            if not server.is_running():
                print(f"error: engine exited; log: {server.log_path}", file=sys.stderr)
                return 1
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    argv = sys.argv[1:] if argv is None else argv
    return serve(parse_serve_args(argv))


if __name__ == "__main__":
    sys.exit(main())
