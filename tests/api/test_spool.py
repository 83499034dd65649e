"""Spool: a body written a batch at a time on a helper thread lands whole and in order, a
short write is finished, and a body given up leaves no file descriptor open."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.http import uploads
from app.http.problems import ServiceError
from app.http.uploads import Spool, stream_body


class _Body:
    """Stands in for a request whose body is `chunks`."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.headers: dict[str, str] = {}
        self._chunks = chunks

    async def stream(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            await asyncio.sleep(0)
            yield chunk


async def _spool(path: Path, chunks: list[bytes], limit: int) -> int:
    spool = Spool(path)
    request: Any = _Body(chunks)
    try:
        size = await stream_body(request, limit, spool.write, 0)
    except BaseException:
        await spool.close(complete=False)
        raise
    await spool.close()
    return size


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 25 bytes, so that a short body is written in several."""
    monkeypatch.setattr(uploads, "SPOOL_BATCH", 25)


def test_a_body_lands_whole_and_in_order(tmp_path: Path) -> None:
    chunks = [bytes([i]) * (i % 7 + 1) for i in range(60)]
    target = tmp_path / "body"
    assert asyncio.run(_spool(target, chunks, 10_000)) == sum(map(len, chunks))
    assert target.read_bytes() == b"".join(chunks)


def test_a_short_write_is_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def first_only(fd: int, chunks: list[bytes]) -> int:
        return os.write(fd, chunks[0][:3])

    monkeypatch.setattr(uploads.os, "writev", first_only)
    chunks = [b"abcdefghij"] * 9
    target = tmp_path / "body"
    asyncio.run(_spool(target, chunks, 10_000))
    assert target.read_bytes() == b"".join(chunks)


def test_a_body_given_up_closes_its_file(tmp_path: Path) -> None:
    before = _open_fds()
    with pytest.raises(ServiceError) as refused:
        asyncio.run(_spool(tmp_path / "body", [b"x" * 20] * 10, 100))
    assert refused.value.code == "payload-too-large"
    assert _open_fds() == before
