"""``python -m benchmarks.proxy``: see :mod:`benchmarks.proxy.overhead`."""

import sys

from benchmarks.proxy.overhead import main

if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
