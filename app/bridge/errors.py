"""Failures of the torch bridge, and the one seam where torch's exceptions become messages."""

from __future__ import annotations

import re

from app.failure import Failure

#: torch messages can be long (whole graphs in them); a problem detail needs one short line.
MAX_MESSAGE_CHARS = 500

_SPACES = re.compile(r"\s+")
#: How allocators word a refused allocation (torch's CPU allocator, glibc, CUDA).
_ALLOCATION = re.compile(
    r"can't allocate memory|cannot allocate memory|not enough memory|out of memory", re.IGNORECASE
)


class BridgeFailure(Failure):
    """A coded failure of the bridge: conversion, torch-level checks, safetensors, worker pool."""


def one_line(exc: BaseException) -> str:
    """An exception's message as one bounded line: no traceback, no newlines."""
    text = _SPACES.sub(" ", str(exc)).strip() or type(exc).__name__
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 3] + "..."
    return text


def is_allocation_failure(exc: BaseException) -> bool:
    """Whether an exception reports a refused memory allocation (MemoryError or torch's words)."""
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and _ALLOCATION.search(str(exc)) is not None
    )
