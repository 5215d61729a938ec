"""Start what every rollout talks to: the vLLM server, the safety gate and the capture proxy (train.py, eval.py).

Each piece registers its stop on the caller's ExitStack as soon as it exists, so an error or a Ctrl-C at any
point stops exactly what was started, in reverse order (clients, proxy, gate, engine).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from harness_rl.launch.components import build_engine, build_proxy_gate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Serving:
    """The started engine and proxy, with clients for both.

    Attributes:
        engine: The running VLLMServer.
        proxy_server: The running ProxyServer.
        proxy: Admin client of the proxy (sessions, traces).
        client: Client of the engine (adapter load/unload).
    """

    engine: Any
    proxy_server: Any
    proxy: Any
    client: Any


def start_serving(
    cfg: DictConfig,
    model_path: str,
    out_dir: Path,
    stack: ExitStack,
    *,
    status: Callable[[str], AbstractContextManager[Any]],
) -> Serving:
    """Check the devices, then start vLLM, the safety gate and the capture proxy in front of it.

    Args:
        cfg: The composed config (engine, model, proxy, safety groups).
        model_path: The resolved base model path (``resolve_model_path``, which fails fast on a missing model).
        out_dir: Where ``engine.log`` and the gate's ``safety_audit.jsonl`` go.
        stack: Receives every stop, registered right after each start.
        status: Shows a spinner while vLLM starts (the caller's progress display).
    """
    from harness_rl.engine.client import EngineClient
    from harness_rl.launch.placement import check_devices
    from harness_rl.proxy.server import ProxyServer
    from harness_rl.rollout.proxy_admin import ProxyAdmin

    check_devices(cfg)  # engine=gpu without CUDA or GPU vLLM: one line now, not vLLM's traceback later
    engine = build_engine(cfg, model_path, log_path=out_dir / "engine.log")
    stack.callback(engine.stop)
    with status(f"starting vLLM ({engine.device}) on {cfg.model.name}"):
        engine.start()
    log.info("engine ready at %s (pid %s, %.0f s)", engine.url, engine.pid, engine.startup_seconds or 0)

    admin_token = secrets.token_urlsafe(24)
    gate = build_proxy_gate(cfg, out_dir)
    if gate is not None:
        stack.callback(gate.close)
    proxy_server = ProxyServer(
        engine.url,
        admin_token,
        base_model=cfg.model.name,
        host=cfg.proxy.host,
        port=cfg.proxy.port,
        safety_gate=gate,
        # The engine's context: each call's max_tokens is capped to it from the first call on (proxy/context.py).
        context_length=cfg.model.max_model_len,
    )
    stack.callback(proxy_server.stop)
    proxy_server.start()
    proxy = ProxyAdmin(proxy_server.url, admin_token)
    stack.callback(proxy.close)
    log.info("capture proxy at %s", proxy_server.url)

    client = EngineClient(engine.url)
    stack.callback(client.close)
    return Serving(engine=engine, proxy_server=proxy_server, proxy=proxy, client=client)
