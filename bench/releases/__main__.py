"""`python -m bench.releases`: run the release matrix (see bench/releases/run.py)."""

import sys

from bench.releases.run import main

sys.exit(main())
