"""``python -m harness_rl.engine serve [overrides]``: run the engine alone until Ctrl-C.

Overrides are the same Hydra overrides ``train.py`` takes (``model=smollm2_135m engine.port=8000``), so the
server is exactly the one a training run would start; its URL is printed when it is ready.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading

from harness_rl.engine.server import EngineStartError, VLLMServer

USAGE = "usage: python -m harness_rl.engine serve [hydra overrides, e.g. model=smollm2_135m engine.port=8000]"


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
    if not argv or argv[0] != "serve" or any(a in ("-h", "--help") for a in argv):
        print(USAGE, file=sys.stderr)
        return 0 if any(a in ("-h", "--help") for a in argv) else 2
    from harness_rl.config.compose import compose_config
    from harness_rl.config.validators import ConfigError
    from harness_rl.launch.components import build_engine
    from harness_rl.launch.placement import check_devices
    from harness_rl.models.fetch import ModelFetchError, resolve_model_path

    try:
        cfg = compose_config(argv[1:])
        model_path = resolve_model_path(cfg.model.path)
        check_devices(cfg)  # a DeviceError is a ConfigError: one line, before vLLM starts
        server = build_engine(cfg, model_path, log_path=None)
    except (ConfigError, ModelFetchError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return serve(server)


if __name__ == "__main__":
    sys.exit(main())
