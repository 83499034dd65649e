"""Bounds of a document's raw bytes, checked before any parse: size, nesting, strings, numbers
and nodes; and the byte scanner for runs of digits they share with the canonical writer."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np

from app.programs.findings import Finding
from app.settings import Limits

#: Python refuses to print integers longer than this (sys.int_info.default_max_str_digits).
MAX_NUMBER_DIGITS = 4300

_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
#: An escaped backslash or quote. Removed left to right, as a JSON reader pairs escapes, they
#: leave every remaining quote a string delimiter.
_ESCAPE = re.compile(rb'\\[\\"]')
#: Openers to +1 and closers to -1 as signed bytes, so that C sums the nesting depth.
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_QUOTE = ord('"')
_NODE_KEY = re.compile(rb'"target"\s*:')
#: Digits to 1, all else to 0: runs of digits are then plain substring searches.
_DIGIT_MASK = bytes(int(48 <= b <= 57) for b in range(256))


def digit_runs(data: bytes, at_least: int) -> Iterator[tuple[int, int]]:
    """(start, end) of every run of `at_least` or more ASCII digits in `data`, in order."""
    mask = data.translate(_DIGIT_MASK)
    run = b"\x01" * at_least
    start = mask.find(run)
    while start != -1:
        end = mask.find(b"\x00", start)
        end = len(mask) if end == -1 else end
        yield start, end
        start = mask.find(run, end)


def check_bounds(data: bytes, limits: Limits) -> list[Finding]:
    """Size, nesting, string, number and node bounds, from the raw bytes before any parse."""
    if len(data) > limits.max_json_bytes:
        return [
            _bound(
                "document-too-large",
                f"{len(data)} bytes; the limit is {limits.max_json_bytes}",
            )
        ]
    cleaned = _ESCAPE.sub(b"", data) if b"\\" in data else data
    longest, structure = _strings(cleaned)
    found: list[Finding] = []
    if longest > limits.max_string_length:
        found.append(
            _bound(
                "document-string-too-long",
                f"a string of {longest} bytes; the limit is {limits.max_string_length}",
            )
        )
    steps = structure.translate(None, delete=_NOT_BRACKETS).translate(_OPEN_CLOSE)
    depth = int(np.cumsum(np.frombuffer(steps, np.int8), dtype=np.int64).max()) if steps else 0
    if depth > limits.max_json_depth:
        found.append(
            _bound(
                "document-too-deep",
                f"nested {depth} levels deep; the limit is {limits.max_json_depth}",
            )
        )
    if next(digit_runs(structure, MAX_NUMBER_DIGITS + 1), None) is not None:
        found.append(
            _bound(
                "document-number-too-long", f"a number with more than {MAX_NUMBER_DIGITS} digits"
            )
        )
    # the key is counted with a plain search, which can only overcount (a string value
    # "target" not followed by a colon); the exact count is taken only past the limit
    nodes = cleaned.count(b'"target"')
    if nodes > limits.max_nodes:
        nodes = sum(1 for _ in _NODE_KEY.finditer(cleaned))
    if nodes > limits.max_nodes:
        found.append(
            _bound(
                "document-too-many-nodes",
                f"{nodes} graph nodes; the limit is {limits.max_nodes}",
            )
        )
    return found


def _strings(cleaned: bytes) -> tuple[int, bytes]:
    """The longest string's length and the bytes outside strings, quotes dropped, of a document
    whose every quote delimits a string (an odd last one opens a string to the end)."""
    chars = np.frombuffer(cleaned, np.uint8)
    quotes = np.flatnonzero(chars == _QUOTE)
    opened, closed = quotes[0::2], quotes[1::2]
    ends = np.append(closed, len(chars)) if len(opened) > len(closed) else closed
    longest = int((ends - opened).max()) - 1 if len(opened) else 0
    # alternate runs kept and dropped: up to each opening quote, then through its closing one
    cuts = np.empty(len(quotes) + 2, np.int64)
    cuts[0], cuts[1:-1], cuts[-1] = 0, quotes, len(chars)
    cuts[2:-1:2] += 1
    kept = np.zeros(len(quotes) + 1, np.bool_)
    kept[0::2] = True
    return longest, chars[np.repeat(kept, np.diff(cuts))].tobytes()


def _bound(code: str, message: str) -> Finding:
    return Finding(code=code, severity="error", path="", message=message)
