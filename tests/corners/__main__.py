"""Draw corner programs, run each through the battery, print failures per class.

    .venv/bin/python -m tests.corners [--seed N] [--count N] [--budget SECONDS] [-v]

Bounded: at most `--count` programs (default 96, eight of each class), and no new program is
started once `--budget` seconds have passed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

from app.settings import Settings
from app.workers.torch import TorchPool
from tests.corners.check import Outcome, run
from tests.corners.programs import CLASSES, Corner, corners


def main(argv: list[str] | None = None) -> int:
    """Run the generator; the exit status is 1 when any program failed."""
    parser = argparse.ArgumentParser(prog="python -m tests.corners")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=96)
    parser.add_argument("--budget", type=float, default=900.0)
    parser.add_argument("-v", "--verbose", action="store_true")
    options = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    settings = Settings()
    opted_in = Settings(allow_opaque_pickles=True)
    started = time.monotonic()
    outcomes: list[Outcome] = []
    drawn = corners(options.seed, min(options.count, 400))
    with TorchPool(settings) as pool, tempfile.TemporaryDirectory() as folder:
        for item in drawn:
            if time.monotonic() - started > options.budget:
                break
            if not isinstance(item, Corner):
                outcomes.append(Outcome(item.name, item.klass, "skip", "export", item.reason))
                continue
            outcomes.append(run(item, settings, opted_in, pool, Path(folder)))
            last = outcomes[-1]
            if options.verbose or last.verdict != "pass":
                sys.stderr.write(f"{last.verdict:4} {last.name}: {last.stage} {last.detail}\n")
    counts = {k: Counter(o.verdict for o in outcomes if o.klass == k) for k in CLASSES}
    lines = [f"{'class':24} {'programs':>8} {'pass':>5} {'fail':>5} {'skip':>5}"]
    for klass, count in counts.items():
        total = sum(count.values())
        lines.append(f"{klass:24} {total:8} {count['pass']:5} {count['fail']:5} {count['skip']:5}")
    every = Counter(o.verdict for o in outcomes)
    lines.append(
        f"{'all':24} {len(outcomes):8} {every['pass']:5} {every['fail']:5} {every['skip']:5}"
    )
    lines.append(f"({time.monotonic() - started:.0f} s, seed {options.seed})")
    sys.stdout.write("\n".join(lines) + "\n")
    return 1 if every["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
