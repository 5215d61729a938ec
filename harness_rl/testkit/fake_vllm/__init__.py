"""The fake vLLM: ``FakeEngine`` (scripted replies, vLLM's reply shapes and error bodies, for tests) and its
fast mode ``fast.FastFakeEngine`` (the same shapes at a fraction of the cost, for the proxy benchmark; run as
``python -m harness_rl.testkit.fake_vllm.fast``, which is why this package does not import it: runpy warns
when the module it runs was already imported by its package)."""

from harness_rl.testkit.fake_vllm.engine import FakeEngine, Reply, token_logprob

__all__ = ["FakeEngine", "Reply", "token_logprob"]
