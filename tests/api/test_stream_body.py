"""stream_body's idle deadline: it moves on with each chunk, so a slow but steady body is taken
whole, while a body that stalls is cut off (body-timeout) about `idle_s` after its last byte."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.http.problems import ServiceError
from app.http.uploads import stream_body


class _Body:
    """Stands in for a request: `chunks` come `gap` seconds apart, then the body ends, or
    stalls for good with `stall`."""

    def __init__(self, chunks: list[bytes], gap: float, stall: bool = False) -> None:
        self.headers: dict[str, str] = {}
        self._chunks, self._gap, self._stall = chunks, gap, stall

    async def stream(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            await asyncio.sleep(self._gap)
            yield chunk
        if self._stall:
            await asyncio.sleep(3600)


def _stream(body: _Body, limit: int, idle_s: float) -> tuple[int, list[bytes]]:
    got: list[bytes] = []
    request: Any = body
    size = asyncio.run(stream_body(request, limit, got.append, idle_s))
    return size, got


def test_a_steady_body_longer_than_the_idle_time_is_taken_whole() -> None:
    chunks = [bytes([i]) * 10 for i in range(8)]
    started = time.monotonic()
    size, got = _stream(_Body(chunks, gap=0.05), limit=1000, idle_s=0.2)
    assert time.monotonic() - started > 0.2  # longer than one idle period in all
    assert (size, got) == (80, chunks)


def test_a_stalled_body_is_cut_off_after_the_idle_time() -> None:
    started = time.monotonic()
    with pytest.raises(ServiceError) as refused:
        _stream(_Body([b"x" * 10, b"y" * 10], gap=0.05, stall=True), limit=1000, idle_s=0.2)
    assert refused.value.code == "body-timeout"
    assert 0.3 <= time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("chunks", "code"), [([b"x" * 60, b"y" * 60], "payload-too-large"), ([], "bad-request")]
)
def test_an_oversized_or_empty_body_is_refused(chunks: list[bytes], code: str) -> None:
    with pytest.raises(ServiceError) as refused:
        _stream(_Body(chunks, gap=0), limit=100, idle_s=0)
    assert refused.value.code == code
