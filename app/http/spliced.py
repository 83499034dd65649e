"""An answer sent as runs of bytes from the files the request holds (app.jobs.output.Splicer):
a torch job's head file and the upload its tensors came from, in the order the job gives them.

The job names a file by its place in `files`, never by path, and each run is checked against
that file's size before anything is sent: a worker that torch ran in is not trusted to choose
what the service reads. Under our protocol (app.http.protocol) the runs go out by sendfile, in
one message; elsewhere (a test client) they are read and sent in chunks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import anyio.to_thread
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from app.http.cycle import SENDFILE
from app.jobs.output import Segment

#: What is read in one trip to a thread: a 350 MB answer in under a hundred trips.
CHUNK = 4 * 1024 * 1024
#: A run shorter than this is sent joined with its small neighbours.
SMALL = 256 * 1024


class SplicedResponse(Response):
    """The concatenation of `segments` of `files`, sent in chunks of at most `CHUNK` bytes."""

    def __init__(
        self, segments: Sequence[Segment], files: Sequence[Path], media_type: str, filename: str
    ) -> None:
        sizes = [path.stat().st_size for path in files]
        for where, offset, length in segments:
            inside = 0 <= where < len(files) and 0 <= offset and 0 < length <= sizes[where] - offset
            if not inside:
                raise RuntimeError(f"a run {where, offset, length} outside the answer's files")
        self.segments = list(segments)
        self.files = list(files)
        super().__init__(media_type=media_type)
        self.headers["content-length"] = str(sum(length for _, _, length in segments))
        self.headers["content-disposition"] = f'attachment; filename="{filename}"'

    def render(self, content: object) -> bytes:
        """No body of its own: `__call__` sends the runs."""
        return b""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the head, then each run, the last chunk closing the body; a client that goes
        away ends the reading (as Starlette's own streamed answers do)."""
        async with anyio.create_task_group() as group:

            async def answer(sendfile: bool) -> None:
                await self._send(send, sendfile=sendfile)
                group.cancel_scope.cancel()

            sendfile = SENDFILE in scope.get("extensions", {})
            group.start_soon(answer, sendfile)
            # the server reports the disconnect, or the end of the answer, here
            while (await receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

    async def _send(self, send: Send, *, sendfile: bool) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        opened: list[BinaryIO] = []
        try:
            for path in self.files:
                opened.append(await anyio.to_thread.run_sync(path.open, "rb", 0))
            fds = [file.fileno() for file in opened]
            if sendfile:
                runs = [(fds[where], offset, length) for where, offset, length in self.segments]
                await send({"type": SENDFILE, "runs": runs, "more_body": False})
                return
            for group in _groups(self.segments):
                for data in await anyio.to_thread.run_sync(_read, fds, group):
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            for file in opened:
                file.close()


def _groups(segments: Sequence[Segment]) -> Iterator[list[Segment]]:
    """The runs in groups of `CHUNK` bytes (the last one less), a run split where a group ends:
    each group is read in one trip to a thread, however many small runs (a zip header, a bias
    vector) it holds."""
    group: list[Segment] = []
    size = 0
    for where, offset, length in segments:
        while length:
            take = min(length, CHUNK - size)
            group.append((where, offset, take))
            size, offset, length = size + take, offset + take, length - take
            if size == CHUNK:
                yield group
                group, size = [], 0
    if group:
        yield group


def _read(fds: Sequence[int], group: Sequence[Segment]) -> list[bytes]:
    """A group's bytes as a few pieces to send: each run of `SMALL` bytes or more as read, the
    smaller ones between them joined (one send rather than many)."""
    pieces: list[bytes] = []
    small: list[bytes] = []
    for where, offset, length in group:
        data = os.pread(fds[where], length, offset)
        if len(data) != length:
            raise RuntimeError(f"a file of the answer ended at {offset + len(data)}")
        if length < SMALL:
            small.append(data)
            continue
        if small:
            pieces.append(b"".join(small))
            small = []
        pieces.append(data)
    if small:
        pieces.append(b"".join(small))
    return pieces
