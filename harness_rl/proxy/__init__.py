"""Capture proxy: serves harness wire dialects, forwards to vLLM, records token ids and log-probs.

Entry points: `harness_rl.proxy.app.create_app` (ASGI app factory), `harness_rl.proxy.server.ProxyServer`
(runner), `python -m harness_rl.proxy serve`.
"""
