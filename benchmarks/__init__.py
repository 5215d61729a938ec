"""Benchmarks, one per area, each run from the checkout as ``python -m benchmarks.<area>`` and ending with its
result line: ``proxy`` (proxy vs direct), ``harnesses`` (concurrent rollouts of one harness), ``safety`` (gate
latency) and ``packing`` (tree vs padding-free vs padded packing). Their data is in ``benchmarks/data/``; the
test doubles they drive are ``harness_rl.testkit``'s."""
