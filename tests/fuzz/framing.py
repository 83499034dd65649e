"""Hostile framing, seeded: multipart bodies with odd boundaries, part counts and part headers,
every path parameter of the API replaced by huge numbers, long strings and odd characters, and
odd Range headers on every route that serves byte ranges.

The content mutants (mutants.py) keep the framing well formed so as to reach the readers; these
keep the content plain so as to reach the HTTP layer's parsers, where a boundary over 256 bytes
and a 5000-digit version number once answered 500.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

#: Path parameter values: numbers past int()'s 4300 digits (with and without leading zeros),
#: past 64 bits, negative, long strings, NUL, dot segments, encoded slashes, non-ASCII digits.
PATH_VALUES = (
    "9" * 5000,
    "0" * 5000 + "1",
    "1" * 20,
    "-1",
    "1e999",
    "a" * 5000,
    "%00",
    "..",
    "%2e%2e",
    "%2F",
    "%ff",
    "%25",
    "\u00b2",
    "\u0661",
    "\U0001f600",
    " ",
    "latest",
    "0",
)
_DOC = b'{"schema_version": {"major": 8, "minor": 20}}'
#: Range values: several (overlapping, adjacent, reversed, past the end), suffixes, huge numbers
#: past 64 bits and int()'s digit limit, empty or odd pieces, other units and spacing.
RANGE_VALUES = (
    "bytes=0-0,2-2,4-4",
    "bytes=0-10,5-15,3-4",
    "bytes=0-1,2-3",
    "bytes=5-1",
    "bytes=-0",
    "bytes=-1",
    "bytes=0-",
    "bytes=-99999999999999999999999",
    "bytes=99999999999999999999999-",
    "bytes=0-" + "9" * 5000,
    "bytes=" + "9" * 5000 + "-",
    "bytes=" + "0" * 5000 + "1-2",
    "bytes=",
    "bytes=-",
    "bytes=--1",
    "bytes=0--1",
    "bytes=,",
    "bytes=0-1,,2-3",
    "bytes = 0-1",
    "bytes=0-1 , 3-4",
    "bytes=0x10-",
    "bytes=1e3-",
    "BYTES=0-1",
    "items=0-1",
    "bytes",
    "=0-1",
    ",".join(["bytes=0-0"] + [f"{i}-{i}" for i in range(2, 2000, 2)]),
    "bytes=" + ",".join(["0-"] * 300),
)


@dataclass(frozen=True)
class RawRequest:
    """One request as sent: method, path (already encoded where it matters), headers, body."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def describe(self) -> str:
        """A short line for a report."""
        head = ", ".join(f"{k}: {v[:60]}" for k, v in self.headers)
        return f"{self.method} {self.path[:120]} [{head}] body {len(self.body)} bytes"


def _boundary(rng: random.Random) -> str:
    length = rng.choice((1, 2, 69, 70, 71, 255, 256, 257, 300, 1000, 5000))
    alphabet = rng.choice(("abc", "0123456789", "'()+_,-./:=? ", "-"))
    # a header value may not start or end with a space (h11 refuses to send it)
    return "".join(rng.choice(alphabet) for _ in range(length)).strip() or "b"


def _part(rng: random.Random, boundary: str, index: int, clean: bool) -> bytes:
    name = rng.choice(("document", "archive", "file", "weights", "old", "new", f"f{index}", ""))
    if clean:
        # well-formed parts of distinct names, so that only their number can be refused
        name = f"f{index}"
    headers = [f'Content-Disposition: form-data; name="{name}"; filename="x.json"']
    oddity = 7 if clean else rng.randrange(8)
    if oddity == 0:
        headers = []
    elif oddity == 1:
        headers.append("X-Long: " + "h" * rng.choice((100, 20_000, 70_000)))
    elif oddity == 2:
        headers += [f"X-{i}: {i}" for i in range(rng.choice((10, 2000)))]
    elif oddity == 3:
        headers.append("Content-Type: " + rng.choice(("application/json", "", "\x7f", "a/b; c")))
    elif oddity == 4:
        headers = ["Content-Disposition: form-data; name=" + "n" * 5000]
    elif oddity == 5:
        headers.append("no colon here")
    eol = "\r\n" if clean or rng.random() < 0.8 else "\n"
    head = eol.join(headers)
    data = _DOC
    if not clean:
        data = rng.choice((_DOC, b"", b"PK\x03\x04" + bytes(40), b"--" + boundary.encode()))
    return f"--{boundary}{eol}{head}{eol}{eol}".encode("latin-1") + data + eol.encode()


def multipart_request(rng: random.Random, path: str) -> RawRequest:
    """A multipart POST to `path` with an odd boundary, part count or part headers."""
    boundary = _boundary(rng)
    count = rng.choice((0, 1, 2, 3, 17, 40, 300))
    clean = rng.random() < 0.3
    body = b"".join(_part(rng, boundary, i, clean) for i in range(count))
    ending = "--\r\n" if clean else rng.choice(("--\r\n", "--", "", "\r\n"))
    body += f"--{boundary}{ending}".encode("latin-1")
    declared = boundary if clean else rng.choice((boundary, f'"{boundary}"', "", boundary + "x"))
    media = f"multipart/form-data; boundary={declared}" if declared else "multipart/form-data"
    return RawRequest("POST", path, (("Content-Type", media),), body)


def fill_path(template: str, value: str, rng: random.Random) -> str:
    """`template` with one of its parameters set to `value` and the others plain."""
    names = re.findall(r"\{(\w+)\}", template)
    hostile = rng.choice(names)
    plain = {"name": "fuzzed", "ref": "1", "digest": "0" * 64}
    path = template
    for name in names:
        path = path.replace("{" + name + "}", value if name == hostile else plain.get(name, "k"))
    return path


def path_requests(spec: dict[str, Any], rng: random.Random) -> list[RawRequest]:
    """Every documented method of every parameterised path, once per hostile value."""
    out: list[RawRequest] = []
    for template, item in spec["paths"].items():
        if "{" not in template:
            continue
        for method in item:
            for value in PATH_VALUES:
                path = fill_path(template, value, rng)
                body = b'{"version": 1, "value": "v"}' if method in ("put", "post") else b""
                headers = (("Content-Type", "application/json"),) if body else ()
                out.append(RawRequest(method.upper(), path, headers, body))
    return out


def multipart_paths(spec: dict[str, Any]) -> list[str]:
    """The paths (parameters filled plainly) whose POST takes multipart/form-data."""
    out = []
    for template, item in spec["paths"].items():
        post = item.get("post", {})
        content = post.get("requestBody", {}).get("content", {})
        if "multipart/form-data" in content:
            out.append(template.replace("{name}", "fuzzed"))
    return out


def range_requests(
    spec: dict[str, Any], plain: dict[str, str], rng: random.Random
) -> list[RawRequest]:
    """Every GET documented with a 206 answer, parameters from `plain`, once per Range value and
    a few random lists of ranges, with and without an If-Range."""
    values = list(RANGE_VALUES)
    for _ in range(8):
        pieces = [
            f"{rng.choice(('', rng.randrange(10**6)))}-{rng.choice(('', rng.randrange(10**6)))}"
            for _ in range(rng.choice((2, 3, 16, 17, 40)))
        ]
        values.append("bytes=" + ",".join(pieces))
    out: list[RawRequest] = []
    for template, item in spec["paths"].items():
        if "206" not in item.get("get", {}).get("responses", {}):
            continue
        path = template
        for name in re.findall(r"\{(\w+)\}", template):
            path = path.replace("{" + name + "}", plain[name])
        for value in values:
            headers: tuple[tuple[str, str], ...] = (("Range", value),)
            if rng.random() < 0.2:
                headers += (("If-Range", rng.choice(('"stale"', 'W/"x"', "", "x"))),)
            out.append(RawRequest("GET", path, headers, b""))
    return out
