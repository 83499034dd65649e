"""SplicedResponse sends the runs a torch job names, in order, from the files the request holds,
and refuses a run outside them before anything is sent."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from app.http import spliced
from app.http.spliced import SplicedResponse


def _sent(response: SplicedResponse, *, leaves: bool = False) -> tuple[list[Any], bytes]:
    """What `response` sends to a client that stays to the end of the answer, or that `leaves`
    as soon as the answer starts."""
    messages: list[Any] = []

    async def run() -> None:
        ended = asyncio.Event()

        async def receive() -> Any:
            if not leaves:
                await ended.wait()  # as uvicorn: the disconnect, or the answer's end
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            messages.append(message)
            if message.get("more_body") is False:
                ended.set()
            await asyncio.sleep(0)

        await response({"type": "http"}, receive, send)

    asyncio.run(run())
    return messages, b"".join(m.get("body", b"") for m in messages[1:])


def test_the_runs_are_sent_in_order_a_group_per_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spliced, "CHUNK", 6)
    monkeypatch.setattr(spliced, "SMALL", 4)
    head, upload = tmp_path / "head", tmp_path / "upload"
    head.write_bytes(b"HEADtail")
    upload.write_bytes(bytes(range(100)))
    segments = [(0, 0, 4), (1, 10, 7), (0, 4, 4), (1, 0, 1)]
    response = SplicedResponse(segments, [head, upload], "application/zip", "program.pt2")
    messages, body = _sent(response)
    assert [m["more_body"] for m in messages[1:]] == [True] * (len(messages) - 2) + [False]
    assert body == b"HEAD" + bytes(range(10, 17)) + b"tail" + b"\x00"
    # groups of 6 bytes; in each, a run of 4 or more sent as read, shorter ones joined
    assert [len(m["body"]) for m in messages[1:]] == [4, 2, 5, 1, 4, 0]
    headers = dict(messages[0]["headers"])
    assert headers[b"content-length"] == str(len(body)).encode()
    assert headers[b"content-disposition"] == b'attachment; filename="program.pt2"'
    assert headers[b"content-type"] == b"application/zip"


@pytest.mark.parametrize("segment", [(2, 0, 1), (-1, 0, 1), (1, 95, 6), (0, -1, 2), (0, 0, 0)])
def test_a_run_outside_the_files_is_refused(segment: tuple[int, int, int], tmp_path: Path) -> None:
    head, upload = tmp_path / "head", tmp_path / "upload"
    head.write_bytes(b"HEAD")
    upload.write_bytes(bytes(100))
    with pytest.raises(RuntimeError, match="outside the answer's files"):
        SplicedResponse([segment], [head, upload], "application/zip", "program.pt2")


def test_a_client_that_leaves_stops_the_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spliced, "CHUNK", 10)
    upload = tmp_path / "upload"
    upload.write_bytes(bytes(100_000))
    before = len(os.listdir("/proc/self/fd"))
    response = SplicedResponse([(0, 0, 100_000)], [upload], "application/zip", "program.pt2")
    messages, body = _sent(response, leaves=True)
    assert len(body) < 100_000
    assert all(m.get("more_body", True) for m in messages)  # never finished
    assert len(os.listdir("/proc/self/fd")) == before
