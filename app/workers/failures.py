"""Failures of the worker pools, and how an exception becomes a one-line message."""

from __future__ import annotations

import re

from app.failure import Failure

_SPACES = re.compile(r"\s+")
#: How allocators word a refused allocation (torch's CPU allocator, glibc, CUDA).
_ALLOCATION = re.compile(
    r"can't allocate memory|cannot allocate memory|not enough memory|out of memory", re.IGNORECASE
)


class WorkerFailure(Failure):
    """A coded failure of a worker pool (crash, timeout, memory, start, closed) or of its job."""


def one_line(exc: BaseException) -> str:
    """An exception's whole message as one line: no traceback, no newlines, nothing cut."""
    return _SPACES.sub(" ", str(exc)).strip() or type(exc).__name__


def is_allocation_failure(exc: BaseException) -> bool:
    """Whether an exception reports a refused memory allocation (MemoryError or torch's words)."""
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and _ALLOCATION.search(str(exc)) is not None
    )
