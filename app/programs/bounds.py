"""Bounds of a document's raw bytes, checked before any parse: size, nesting, strings, numbers
and nodes; and the byte scanner for runs of digits they share with the canonical writer."""

from __future__ import annotations

import array
import itertools
import re
from collections.abc import Iterator

from app.programs.findings import Finding
from app.settings import Limits

#: Python refuses to print integers longer than this (sys.int_info.default_max_str_digits).
MAX_NUMBER_DIGITS = 4300

_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
#: Openers to +1 and closers to -1 as signed bytes, so that C sums the nesting depth.
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
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
    # Dropping escaped backslashes and quotes leaves every remaining quote a string delimiter,
    # so a split alternates structure and string contents, all in C.
    cleaned = data.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in data else data
    parts = cleaned.split(b'"')
    found: list[Finding] = []
    longest = max(map(len, itertools.islice(parts, 1, None, 2)), default=0)
    if longest > limits.max_string_length:
        found.append(
            _bound(
                "document-string-too-long",
                f"a string of {longest} bytes; the limit is {limits.max_string_length}",
            )
        )
    structure = b"".join(itertools.islice(parts, 0, None, 2))
    del parts
    steps = structure.translate(None, delete=_NOT_BRACKETS).translate(_OPEN_CLOSE)
    depth = max(itertools.accumulate(array.array("b", steps)), default=0)
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


def _bound(code: str, message: str) -> Finding:
    return Finding(code=code, severity="error", path="", message=message)
