"""schemathesis hooks (loaded through SCHEMATHESIS_HOOKS by test_schemathesis.py): besides the
cases schemathesis draws from openapi.json, some get one path parameter replaced by a hostile
value, a multipart body sent under a long or odd boundary, or an odd Range header, drawn from the
framing fuzzer's values; date-time parameters and fields get naive and aware times mixed, and
URL fields URLs a resolver refuses. The schema says a path parameter is any string and a
boundary any token, so schemathesis alone rarely sends a 5000-digit version number, a 300-byte
boundary, one naive time beside an aware one or an empty host label; those are the classes that
once answered 500."""

from __future__ import annotations

import json
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


#: date-times with and without an offset, at the calendar's ends, and impossible: mixing a naive
#: one with an aware one once answered 500 (search's created_after/created_before)
_DATE_TIMES = (
    "2026-01-01T00:00:00",
    "2026-01-01T00:00:00Z",
    "2026-01-01T00:00:00+14:00",
    "0001-01-01T00:00:00-12:00",
    "9999-12-31T23:59:59",
    "2026-02-30T00:00:00Z",
)
#: URLs that parse but that a resolver or IDNA refuses (an empty label once answered 500)
_URLS = (
    "https://a..b/",
    "https://" + "x" * 64 + ".example/",
    "http://.example/",
    "https://xn--/",
    "https://\u00e9\u00e9.example/",
    "http://[::1",
    "http://a:99999/",
)


def _date_time_parameters(case: Any) -> list[str]:
    """The query parameters the operation documents as date-times."""
    found = []
    for parameter in case.operation.definition.raw.get("parameters", []):
        if parameter.get("in") == "query" and '"date-time"' in json.dumps(parameter):
            found.append(parameter["name"])
    return found


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
    times = _date_time_parameters(case)
    if times and _RNG.randrange(_EVERY) == 0:
        case.query = {**(case.query or {}), **{t: _RNG.choice(_DATE_TIMES) for t in times}}
    if isinstance(case.body, dict) and _RNG.randrange(_EVERY) == 0:
        if "url" in case.body:
            case.body = {**case.body, "url": _RNG.choice(_URLS)}
        if "expires_at" in case.body:
            case.body = {**case.body, "expires_at": _RNG.choice(_DATE_TIMES)}
    return case
