"""`python -m bench`: run the benchmarks (see bench/run.py)."""

import sys

from bench.run import main

sys.exit(main())
