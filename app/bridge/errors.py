"""Failures of the torch bridge, and the one seam where torch's exceptions become messages."""

from __future__ import annotations

import re

from app.failure import Failure, is_allocation_failure, one_line

__all__ = ["BridgeFailure", "is_allocation_failure", "one_line", "torch_message"]

_SPACES = re.compile(r"\s+")
#: Where torch's "Failed deserializing node" message starts quoting its cause's traceback.
_EMBEDDED_TRACEBACK = "\n Original exception "
#: Causes we recognise in torch's words, and what to do about them.
_HINTS: tuple[tuple[str, str], ...] = (
    (
        "in pytree is not registered",
        "a pytree type is named outside the module call signatures' treespecs, where "
        "pt2serde registers stand-ins; load it where its defining library is installed",
    ),
    (
        "Can't deserialize TreeSpec of namedtuple",
        "a namedtuple type is named outside the module call signatures' treespecs, where "
        "pt2serde registers stand-ins; load it where its defining library is installed",
    ),
    (
        "'_OpNamespace'",
        "an operator namespace is missing from the worker: set PT2SERDE_WORKER_IMPORTS to "
        "the module that registers it",
    ),
)


class BridgeFailure(Failure):
    """A coded failure of the bridge: conversion, torch-level checks, safetensors, worker pool."""


def torch_message(exc: BaseException) -> str:
    """A torch exception's whole message with the exceptions it was raised from, on one line,
    and a hint where we know the cause."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        # torch's deserializer appends the cause's traceback to its own message; the cause
        # itself follows as the next part.
        text = str(current).split(_EMBEDDED_TRACEBACK, 1)[0]
        line = _SPACES.sub(" ", text).strip()
        parts.append(line if current is exc else f"{type(current).__name__}: {line}")
        current = current.__cause__
    message = "; caused by ".join(parts)
    hints = [hint for marker, hint in _HINTS if marker in message]
    return " ".join([message, *(f"(hint: {hint})" for hint in hints)])
