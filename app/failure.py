"""The root of every coded failure below the HTTP layer (archive, programs, bridge, registry), and
the bridge's own, which both sides of the torch door raise."""

from __future__ import annotations

import re

from schema import Issue

_SPACES = re.compile(r"\s+")
#: How allocators word a refused allocation (torch's CPU allocator, glibc, CUDA).
_ALLOCATION = re.compile(
    r"can't allocate memory|cannot allocate memory|not enough memory|out of memory", re.IGNORECASE
)


class Failure(Exception):
    """A coded, human-readable failure; `issues` carries per-path details where there are any."""

    def __init__(self, code: str, message: str, issues: list[Issue] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.issues = issues or []

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class BridgeFailure(Failure):
    """A coded failure of the bridge: conversion, torch-level checks, safetensors, worker pool.

    Here rather than in app.bridge: the torch-free tensor readers (app.tensors) and torch jobs
    (app.jobs) raise it as well as torch's modules, and the torch pool answers with it."""


def one_line(exc: BaseException) -> str:
    """An exception's whole message as one line: no traceback, no newlines, nothing cut."""
    return _SPACES.sub(" ", str(exc)).strip() or type(exc).__name__


def is_allocation_failure(exc: BaseException) -> bool:
    """Whether an exception reports a refused memory allocation (MemoryError or torch's words)."""
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and _ALLOCATION.search(str(exc)) is not None
    )
