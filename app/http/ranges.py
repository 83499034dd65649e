"""Byte responses with an ETag, If-None-Match (304) and Range (206, multipart/byteranges, 416).

A whole plain file goes out through Starlette's `FileResponse` (which can hand the path to the
server); ranges, and bodies that are not plain files (an object store's object, an archive
rebuilt from its parts), stream from any seekable handle. The rules for Range are stricter than
`FileResponse`'s in one way and laxer in another, on purpose: a malformed or oversized range set
is ignored (RFC 9110 lets a server send the whole representation) rather than answered 400, and
ranges starting past the end are dropped, 416 (a problem document) only when none is left.
"""

from __future__ import annotations

import os
import secrets
from collections import Counter
from collections.abc import Iterator
from typing import BinaryIO

from fastapi import Request
from fastapi.responses import FileResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from app.http.problems import problem

_CHUNK = 1 << 16
#: More ranges than this in one Range header are ignored (RFC 9110 14.2 lets a server ignore a
#: set of many small ranges: each costs a part header and a seek).
MAX_RANGES = 16
Span = tuple[int, int]


def etag_matches(header: str | None, etag: str) -> bool:
    """Whether an If-None-Match `header` names the (quoted) `etag`, or any."""
    if header is None:
        return False
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


def _position(text: str) -> int:
    """A range's byte position; ValueError unless ASCII digits. Positions past any file's size
    are not parsed (int() refuses over 4300 digits): they only need to compare as too large."""
    if not (text.isascii() and text.isdigit()):
        raise ValueError(text)
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= 19 else 1 << 64


def byte_ranges(header: str | None, size: int) -> list[Span] | None:
    """The (start, end exclusive) spans a ``bytes=`` Range asks for, in ascending order with
    overlapping or adjacent ones coalesced; [] when none is satisfiable (416).

    None sends the whole representation with 200: no Range, another unit, a malformed range
    set or more than MAX_RANGES ranges, all of which RFC 9110 lets a server ignore.
    """
    if not header:
        return None
    unit, equals, spec = header.partition("=")
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not equals or unit.strip().lower() != "bytes" or not items or len(items) > MAX_RANGES:
        return None
    spans: list[Span] = []
    try:
        for item in items:
            first, dash, last = (part.strip() for part in item.partition("-"))
            if not dash or not (first or last):
                return None
            if not first:
                suffix = _position(last)
                if suffix > 0 and size > 0:
                    spans.append((max(0, size - suffix), size))
                continue
            start = _position(first)
            end = _position(last) + 1 if last else size
            if last and end <= start:
                return None
            if start < size:
                spans.append((start, min(end, size)))
    except ValueError:
        return None
    merged: list[Span] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _chunks(
    handle: BinaryIO, spans: list[tuple[bytes, int, int]], tail: bytes = b""
) -> Iterator[bytes]:
    """Each span's prefix and bytes, then `tail`; the handle is closed at the end."""
    try:
        for prefix, start, end in spans:
            if prefix:
                yield prefix
            handle.seek(start)
            left = end - start
            while left > 0:
                chunk = handle.read(min(_CHUNK, left))
                if not chunk:
                    break
                left -= len(chunk)
                yield chunk
        if tail:
            yield tail
    finally:
        handle.close()


def _plain_file(handle: BinaryIO) -> str | None:
    """The path of `handle` when it is a regular file of the filesystem."""
    name = getattr(handle, "name", None)
    return name if isinstance(name, str) and os.path.isfile(name) else None


def _whole(
    handle: BinaryIO, size: int, media_type: str, headers: dict[str, str], plain: bool
) -> Response:
    path = _plain_file(handle) if plain else None
    if path is not None:
        handle.close()
        return FileResponse(path, media_type=media_type, headers=headers)
    return StreamingResponse(
        _chunks(handle, [(b"", 0, size)]),
        media_type=media_type,
        headers={**headers, "Content-Length": str(size)},
    )


def _multipart(
    handle: BinaryIO, spans: list[Span], size: int, media_type: str, headers: dict[str, str]
) -> Response:
    boundary = secrets.token_hex(16)
    parts = [
        (
            # the CRLF before each boundary but the first belongs to the delimiter
            ("\r\n" if i else "").encode()
            + f"--{boundary}\r\nContent-Type: {media_type}\r\n".encode()
            + f"Content-Range: bytes {start}-{end - 1}/{size}\r\n\r\n".encode(),
            start,
            end,
        )
        for i, (start, end) in enumerate(spans)
    ]
    tail = f"\r\n--{boundary}--\r\n".encode("latin-1")
    length = sum(len(prefix) + end - start for prefix, start, end in parts) + len(tail)
    return StreamingResponse(
        _chunks(handle, parts, tail),
        status_code=206,
        media_type=f"multipart/byteranges; boundary={boundary}",
        headers={**headers, "Content-Length": str(length)},
    )


class _Downloads:
    """Answers being sent from stored bytes, per client address, in this HTTP process."""

    def __init__(self) -> None:
        self.open: Counter[str] = Counter()

    def take(self, client: str, cap: int) -> bool:
        """Count one more for `client`, unless it already has `cap` (0: no cap)."""
        if cap and self.open[client] >= cap:
            return False
        self.open[client] += 1
        return True

    def give_back(self, client: str) -> None:
        """One of `client`'s answers is done."""
        self.open[client] -= 1
        if self.open[client] <= 0:
            del self.open[client]


_DOWNLOADS = _Downloads()


class _Counted(Response):
    """An answer that holds one of its client's download slots until it is sent or given up."""

    def __init__(self, inner: Response, client: str) -> None:
        self.inner, self.client = inner, client
        # the same status and header list: what the framework adds to this answer is sent
        self.status_code, self.raw_headers = inner.status_code, inner.raw_headers
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the answer, then free the slot (a dropped client frees it too)."""
        try:
            self.inner.status_code = self.status_code
            await self.inner(scope, receive, send)
        finally:
            _DOWNLOADS.give_back(self.client)
        if self.background is not None:
            await self.background()


def bytes_response(
    request: Request, handle: BinaryIO, etag: str, media_type: str, headers: dict[str, str]
) -> Response:
    """The seekable `handle`'s bytes with ETag, If-None-Match (304) and Range support: one range
    as a 206, several as a 206 multipart/byteranges, none satisfiable as a 416
    (``Content-Range: bytes */size``). The handle is closed once the answer is sent. A client
    with `http_max_downloads_per_client` answers still open gets 429 too-many-downloads: open
    downloads hold buffers and handles, so one address may not hold them all."""
    client = request.client.host if request.client else ""
    cap = request.app.state.settings.http_max_downloads_per_client
    if not _DOWNLOADS.take(client, cap):
        handle.close()
        refused = problem(
            "too-many-downloads", f"{client} already has {cap} downloads open; retry after one"
        )
        refused.headers["Retry-After"] = "1"
        return refused
    try:
        return _Counted(_bytes_response(request, handle, etag, media_type, headers), client)
    except BaseException:
        _DOWNLOADS.give_back(client)
        raise


def _bytes_response(
    request: Request, handle: BinaryIO, etag: str, media_type: str, headers: dict[str, str]
) -> Response:
    quoted = f'"{etag}"'
    common = {**headers, "ETag": quoted, "Accept-Ranges": "bytes"}
    if etag_matches(request.headers.get("if-none-match"), quoted):
        handle.close()
        return Response(status_code=304, headers=common)
    size = handle.seek(0, 2)
    if_range = request.headers.get("if-range")
    asked = request.headers.get("range")
    spans = None
    if if_range is None or if_range.strip() == quoted:
        spans = byte_ranges(asked, size)
    if spans is None:
        # FileResponse reads Range itself: it gets the file only when there is none to ignore
        return _whole(handle, size, media_type, common, plain=asked is None)
    if not spans:
        handle.close()
        response = problem(
            "range-not-satisfiable", f"no range of {(asked or '')[:200]!r} is in the {size} bytes"
        )
        response.headers.update({**common, "Content-Range": f"bytes */{size}"})
        return response
    if len(spans) > 1:
        return _multipart(handle, spans, size, media_type, common)
    start, end = spans[0]
    return StreamingResponse(
        _chunks(handle, [(b"", start, end)]),
        status_code=206,
        media_type=media_type,
        headers={
            **common,
            "Content-Length": str(end - start),
            "Content-Range": f"bytes {start}-{end - 1}/{size}",
        },
    )
