"""Jobs the worker tests submit; they run inside worker processes and import no torch."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def modules() -> tuple[int, bool, bool]:
    """The worker's pid, whether torch is imported in it, and whether its preload is."""
    return os.getpid(), "torch" in sys.modules, "app.jobs.documents" in sys.modules


def pid() -> int:
    """The worker's pid."""
    return os.getpid()


def sleep(seconds: float, marker: str = "") -> int:
    """Say it started (by writing `marker`, if given), sleep, return the worker's pid."""
    if marker:
        Path(marker).write_text(str(os.getpid()))
    time.sleep(seconds)
    return os.getpid()


def spin(seconds: float) -> int:
    """Hold the CPU (and the GIL) for `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return os.getpid()


def allocate(size: int) -> int:
    """Allocate `size` bytes: MemoryError past the address-space limit."""
    return len(bytearray(size))


def burn(cpu_seconds: float) -> float:
    """Compute for `cpu_seconds` of this thread's CPU time; the wall time that took."""
    began = time.monotonic()
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass
    return time.monotonic() - began


#: What `hold` keeps alive: the job ends, the memory stays with the worker.
_HELD: list[bytes] = []


def hold(size: int) -> int:
    """Keep `size` bytes resident in the worker (every page written) after the job; its pid."""
    _HELD.append(b"\x01" * size)
    return os.getpid()
