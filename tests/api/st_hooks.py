"""schemathesis hooks (loaded through SCHEMATHESIS_HOOKS by test_schemathesis.py): besides the
cases schemathesis draws from openapi.json, some get one path parameter replaced by a hostile
value, a multipart body sent under a long or odd boundary, or an odd Range header, drawn from the
framing fuzzer's values. The schema says a path parameter is any string and a boundary any
token, so schemathesis alone rarely sends a 5000-digit version number or a 300-byte boundary;
those are the classes that once answered 500."""

from __future__ import annotations

import random
from typing import Any

import schemathesis

from tests.fuzz.framing import PATH_VALUES, RANGE_VALUES

#: one case in `_EVERY` is changed, per kind of change
_EVERY = 3
#: boundary lengths around python-multipart's and RFC 2046's limits
_BOUNDARY_LENGTHS = (69, 70, 71, 255, 256, 257, 1000, 5000)
_RNG = random.Random(20261123)
#: values that would not reach the operation (a slash or dot segment, once decoded, makes it
#: another route's path; the framing fuzzer sends them, allowing for that)
_PATH_VALUES = tuple(v for v in PATH_VALUES if v not in ("..", "%2e%2e", "%2F"))


def _ranged(case: Any) -> bool:
    """Whether the case's operation is a GET documented with a 206 answer."""
    definition = case.operation.definition.raw
    return case.method.upper() == "GET" and "206" in definition.get("responses", {})


@schemathesis.hook
def map_case(context: schemathesis.HookContext, case: Any) -> Any:
    """Make a third of the cases hostile in their path, framing or Range."""
    if case.path_parameters and _RNG.randrange(_EVERY) == 0:
        name = _RNG.choice(sorted(case.path_parameters))
        case.path_parameters[name] = _RNG.choice(_PATH_VALUES)
    if case.media_type == "multipart/form-data" and _RNG.randrange(_EVERY) == 0:
        boundary = "b" * _RNG.choice(_BOUNDARY_LENGTHS)
        case.headers = {
            **(case.headers or {}),
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        }
    if _ranged(case) and _RNG.randrange(_EVERY) == 0:
        case.headers = {**(case.headers or {}), "Range": _RNG.choice(RANGE_VALUES)}
    return case
