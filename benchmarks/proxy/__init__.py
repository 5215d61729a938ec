"""The proxy benchmark (``python -m benchmarks.proxy``): the capture proxy against calling the engine directly.

Modules: ``overhead`` (the benchmark itself, what ``python -m benchmarks.proxy`` runs), ``load`` (the agent-like
load generator), ``graph`` (rollout-graph linking time), ``procs`` (pinned child processes). The engine it
drives is the fake vLLM's fast mode, ``harness_rl.testkit.fake_vllm.fast``.
"""
