"""``python -m benchmarks.harnesses``: see :mod:`benchmarks.harnesses.throughput`."""

import sys

from benchmarks.harnesses.throughput import main

if __name__ == "__main__":
    sys.exit(main())
