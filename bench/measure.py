"""Timing and peak memory of one call, repeated; a check of the first result before any figure.

Peak memory is the growth of the resident set over the call: the kernel's high-water mark
(`VmHWM`) is reset through `/proc/self/clear_refs` before each run, freed memory is handed back
to the OS first (`gc.collect` and glibc's `malloc_trim`), and the growth is the mark after the
run minus the resident set before it. Where the kernel does not allow the reset, memory is not
reported.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

#: Set (to anything) to time with the process' CPU time instead of the wall clock: on a machine
#: other work shares, CPU time is what a run costs. Children inherit it with the environment.
CPU_TIME_VARIABLE = "BENCH_CPU_TIME"

_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME) if _LIBC_NAME else None


class CheckFailed(Exception):
    """A benchmark's output differs from torch's (the row prints FAIL instead of a figure)."""


@dataclass(frozen=True)
class Timing:
    """The best and median time of `runs` runs, and the largest resident-set growth."""

    best: float
    median: float
    runs: int
    peak: int | None

    @classmethod
    def of(cls, runs: list[float], peak: int | None) -> Timing:
        """The timing of these runs."""
        return cls(min(runs), statistics.median(runs), len(runs), peak)

    def plus(self, other: Timing) -> Timing:
        """Two calls made one after the other: best with best, median with median."""
        return Timing(
            self.best + other.best,
            self.median + other.median,
            min(self.runs, other.runs),
            _max_peak([self.peak, other.peak]),
        )


def total(timings: list[Timing]) -> Timing:
    """Several programs' timings added up (the zoo row)."""
    return Timing(
        sum(t.best for t in timings),
        sum(t.median for t in timings),
        min(t.runs for t in timings),
        _max_peak([t.peak for t in timings]),
    )


def _max_peak(peaks: list[int | None]) -> int | None:
    known = [p for p in peaks if p is not None]
    return max(known) if known else None


def status_kib(field: str, pid: int | str = "self") -> int | None:
    """A `VmRSS`-style field of /proc/<pid>/status, in bytes (None off Linux)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return None


def reset_peak(pid: int | str = "self") -> bool:
    """Reset the kernel's resident high-water mark of a process; False where not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def release_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS.

    Long-lived objects (torch's modules, the loaded programs) should be moved out of the
    collector's sight with `gc.freeze()` first, or each collection walks all of them.
    """
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def timed(
    fn: Callable[[], T],
    *,
    repeats: int,
    budget: float = math.inf,
    check: Callable[[T], None] | None = None,
) -> tuple[Timing, T]:
    """Run `fn` up to `repeats` times (fewer past `budget` seconds); `check` the first result.

    The check raises CheckFailed before a second run starts, so no figure is ever reported for
    an output that was not checked. Memory is measured over the first run only.
    """
    runs: list[float] = []
    peak: int | None = None
    results: list[T] = []
    base: int | None = None
    can_reset = False
    clock = time.process_time if os.environ.get(CPU_TIME_VARIABLE) else time.perf_counter
    for i in range(max(1, repeats)):
        results.clear()
        if i == 0:
            release_memory()
            base = status_kib("VmRSS")
            can_reset = reset_peak()
        started = clock()
        results.append(fn())
        runs.append(clock() - started)
        if i == 0:
            high = status_kib("VmHWM")
            if can_reset and base is not None and high is not None:
                peak = high - base
        if i == 0 and check is not None:
            check(results[0])
        if sum(runs) + runs[-1] > budget:
            break
    return Timing.of(runs, peak), results[0]
