"""The harness benchmark (``python -m benchmarks.harnesses --harness NAME --sessions N``): concurrent rollouts
of one real harness per minute and their memory. Modules: ``throughput`` (the benchmark, what ``python -m
benchmarks.harnesses`` runs) and ``memory`` (the RSS sampler)."""
