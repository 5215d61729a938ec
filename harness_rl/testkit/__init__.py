"""Test doubles shared by the tests, the benchmarks and ``python -m harness_rl.harnesses check``.

- :mod:`harness_rl.testkit.fake_vllm`: a scripted stand-in for vLLM's OpenAI server (``FakeEngine``) and its
  fast mode for benchmarks (``FastFakeEngine``);
- :mod:`harness_rl.testkit.scripted_proxy`: the real capture proxy in front of the fake engine
  (``ScriptedProxy``), what harness tests and the ``harnesses check`` command point a harness at;
- :mod:`harness_rl.testkit.httpx_upstream`: the proxy's engine client over an httpx transport, for tests that
  hand the proxy an in-process engine or a transport that records the wire.

Production code never imports this package (``harnesses/check.py`` is the one allowed exception, and
tests/unit/test_testkit_boundary.py enforces it); what production needs from the fake engine, its toy token
format, is :mod:`harness_rl.proxy.toy_chat_template`.
"""
