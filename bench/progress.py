"""Progress lines on stderr, stamped with the seconds since the run started."""

from __future__ import annotations

import sys
import time

_STARTED = time.perf_counter()


def progress(message: str) -> None:
    """Print one progress line on stderr."""
    print(f"[bench {time.perf_counter() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def elapsed() -> float:
    """Seconds since the run started."""
    return time.perf_counter() - _STARTED


def started() -> float:
    """The run's start on the monotonic clock (the same clock in every process of the machine)."""
    return _STARTED


def follow(start: float) -> None:
    """Count elapsed time from another process' start (a measuring child follows the run's)."""
    global _STARTED
    _STARTED = start
