"""The request-response cycle our protocol (app.http.protocol) runs each request in: uvicorn's,
with large bodies and answers moved by the kernel rather than through Python.

- A body's chunks are held as they came and joined once for the app (uvicorn copies each byte
  into a bytearray, then again for the app).
- `RECVFILE`: a route that stores a body whole (app.http.uploads) has the rest of it spliced
  from the socket into its file on a helper thread (splice(2), no copy into the service). The
  connection then closes after the answer: the HTTP parser never saw those bytes.
- `SENDFILE`: an answer's runs of bytes sent from files by sendfile(2) on a helper thread, so a
  350 MB answer is never read into the service (uvicorn has no http.response.pathsend).

The threads work on duplicates of the socket's and files' descriptors, so a connection or a
file closed meanwhile can never make them touch another; they look every `_POLL_MS` whether
the connection was lost, and no thread outlives the call that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from uvicorn._types import ASGIReceiveEvent, ASGISendEvent
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from app.http.problems import ServiceError
from app.settings import Settings

#: The ASGI extension (in `scope["extensions"]`) and message type that send runs of files:
#: `{"type": SENDFILE, "runs": [(fd, offset, count), ...], "more_body": bool}`.
SENDFILE = "pt2serde.sendfile"
#: The ASGI extension whose "into" is `async (fd, idle_s) -> size`: the whole body, appended to
#: the file `fd`. Offered for a body with a Content-Length, before any of it is received.
RECVFILE = "pt2serde.recvfile"
#: How often a thread looks whether the connection was lost meanwhile.
_POLL_MS = 100
#: One sendfile call's most: a long run is sent in pieces, each ending in a look at the stop flag.
_SENDFILE_STEP = 16 * 1024 * 1024
#: The pipe a body is spliced through (Linux's default cap on a pipe's size).
_PIPE_SIZE = 1024 * 1024
Run = tuple[int, int, int]
_T = TypeVar("_T")


@functools.cache
def send_stall_s() -> float:
    """Seconds a client may take none of an answer before its connection is dropped (a
    stalled reader must not hold a thread, a buffer or a download slot forever); read once per
    HTTP process (`Settings.http_send_stall_s`)."""
    return Settings.from_env().http_send_stall_s


def _nothing() -> None:
    """What a released cycle's `body_done` does."""


class Cycle(RequestResponseCycle):
    """uvicorn's request-response cycle with held body chunks, `RECVFILE` and `SENDFILE`."""

    held: list[bytes]
    held_size: int
    #: body bytes the parser has passed on so far
    seen: int
    #: set when the connection is lost (shared by its cycles): a transfer's thread stops
    lost: threading.Event
    #: stops the protocol's body deadline (a body received by splice ends unseen by the parser)
    body_done: Callable[[], None]

    def adopt(self, body_done: Callable[[], None], lost: threading.Event) -> None:
        """Turn uvicorn's fresh cycle into this kind (same state, plus ours); `lost` is set
        when its connection is lost."""
        self.__class__ = Cycle
        self.held, self.held_size, self.seen = [], 0, 0
        self.lost, self.body_done = lost, body_done
        if self.transport.get_extra_info("sslcontext") is not None:
            return  # the kernel would move plain bytes past TLS: the ASGI way only
        extensions = self.scope.setdefault("extensions", {})
        extensions[SENDFILE] = {}
        headers = dict(self.scope["headers"])
        if b"transfer-encoding" not in headers and headers.get(b"content-length", b"").isdigit():
            extensions[RECVFILE] = {"into": self._receive_into}

    def release(self) -> None:
        """Drop what ties this cycle to its protocol and to itself (the protocol's deadline, the
        receive-into-a-file extension in its scope), as uvicorn drops its `on_response` once a
        request is done: without the reference cycles, the request's scope and head go as soon
        as the connection does, not at the next cycle collection."""
        self.body_done = _nothing
        self.scope.get("extensions", {}).pop(RECVFILE, None)

    def hold(self, body: bytes) -> int:
        """Keep a chunk for the app; how many bytes are now held."""
        self.held.append(body)
        self.held_size += len(body)
        self.seen += len(body)
        self.message_event.set()
        return self.held_size

    def _take_held(self) -> list[bytes]:
        held, self.held, self.held_size = self.held, [], 0
        return held

    def _continue(self) -> None:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False

    async def receive(self) -> ASGIReceiveEvent:
        """The next body chunks, joined (uvicorn's receive, without its copy of each byte)."""
        self._continue()
        if not self.disconnected and not self.response_complete:
            self.flow.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        held = self._take_held()
        body = held[0] if len(held) == 1 else b"".join(held)
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def _receive_into(self, fd: int, idle_s: float) -> int:
        """`RECVFILE`, called before any `receive`: the body appended to `fd`, what came already
        written, the rest spliced from the socket; its size. The connection closes after the
        answer."""
        self.keep_alive = False  # from here the parser is out of step with the connection
        self._continue()
        self.flow.pause_reading()  # no more chunks through the parser: the rest is spliced
        length = int(dict(self.scope["headers"])[b"content-length"])
        held = self._take_held()
        rest = length - self.seen if self.more_body else 0
        if self.disconnected:
            raise ServiceError("bad-request", "the client disconnected mid-upload")
        socket = self.transport.get_extra_info("socket")
        fds = _dup(socket.fileno(), fd)
        outcome = await _finish(
            *_thread(_receive_all, fds, held, rest, idle_s, stop=_Stop(self.lost))
        )
        if outcome == "idle":
            raise ServiceError("body-timeout", f"the body sent nothing for {idle_s} seconds")
        if outcome != "done":
            raise ServiceError("bad-request", "the client disconnected mid-upload")
        self.more_body = False
        self.message_event.set()  # a later `receive` gives the body's (empty) end at once
        self.body_done()
        return sum(map(len, held)) + rest

    async def send(self, message: ASGISendEvent) -> None:
        """uvicorn's send, and the `SENDFILE` message; a client that takes none of an answer for
        `send_stall_s()` seconds is dropped, whichever way the answer is sent."""
        if message["type"] == SENDFILE:
            await self._send_runs(message)
            return
        if self.flow.write_paused and not self.disconnected:
            try:
                async with asyncio.timeout(send_stall_s()):
                    await self.flow.drain()
            except TimeoutError:
                # aborted, not closed: a close would wait for the reader to take the buffered
                # bytes; then, as for a lost connection, the app's later sends are dropped
                self.transport.abort()
                self.disconnected = True
        if self.disconnected:
            # the app's disconnect listener gets its turns, so a streamed answer stops being
            # made rather than made in full and dropped
            self.message_event.set()
            await asyncio.sleep(0)
        await super().send(message)

    async def _send_runs(self, message: Any) -> None:
        runs: Sequence[Run] = message["runs"]
        total = sum(count for _, _, count in runs)
        if not self.response_started or self.response_complete or self.chunked_encoding:
            raise RuntimeError("runs of files are sent in a started answer with a content-length")
        if total > self.expected_content_length:
            raise RuntimeError("Response content longer than Content-Length")
        if total and not await self._sendfile(runs):
            # the client went away, or stalled: as uvicorn treats a lost connection
            self.transport.close()
            self.disconnected = True
        if self.disconnected:
            return
        self.expected_content_length -= total
        if not message.get("more_body", False):
            await super().send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _sendfile(self, runs: Sequence[Run]) -> bool:
        """Send the runs straight to the socket from a thread, once the transport has written
        all it holds (so the bytes go out in order); whether all of them went."""
        started = time.monotonic()
        while self.transport.get_write_buffer_size():
            if self.disconnected or time.monotonic() - started > send_stall_s():
                return False
            await asyncio.sleep(0.001)
        if self.disconnected:
            return False
        socket = self.transport.get_extra_info("socket")
        fds = _dup(socket.fileno(), *(fd for fd, _, _ in runs))
        own = [(fds[i + 1], offset, count) for i, (_, offset, count) in enumerate(runs)]
        return await _finish(*_thread(_send_all, fds, own, stop=_Stop(self.lost)))


class _Stop:
    """Whether a transfer's thread is to stop early: its connection was lost, or the answer or
    upload it moves was given up."""

    def __init__(self, lost: threading.Event) -> None:
        self.lost = lost
        self.given_up = threading.Event()

    def __call__(self) -> bool:
        """Stop now?"""
        return self.lost.is_set() or self.given_up.is_set()


def _thread(work: Callable[..., _T], *args: Any, stop: _Stop) -> tuple[asyncio.Future[_T], _Stop]:
    """`work(*args, stop)` on a thread of its own, as a future of this loop (and `stop`): a
    transfer lasts as long as its client takes, so it holds no thread of a pool that others
    wait on."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(setter: Callable[[Any], None], value: object) -> None:
        if not future.done():
            setter(value)

    def run() -> None:
        setter: Callable[[Any], None]
        value: object
        try:
            value, setter = work(*args, stop), future.set_result
        except BaseException as exc:
            value, setter = exc, future.set_exception
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, setter, value)

    threading.Thread(target=run, name="pt2serde-transfer", daemon=True).start()
    return future, stop


async def _finish(work: asyncio.Future[_T], stop: _Stop) -> _T:
    """What a thread's work gives; if the wait is cancelled, the thread is told to stop and
    awaited first (no thread outlives the answer, nor uses descriptors closed after it)."""
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        stop.given_up.set()
        with contextlib.suppress(Exception):
            await asyncio.shield(work)
        raise


def _dup(*fds: int) -> list[int]:
    """Duplicates of `fds`, for a thread to own and close."""
    own: list[int] = []
    try:
        own.extend(os.dup(fd) for fd in fds)
    except OSError:
        _close(own)
        raise
    return own


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _receive_all(fds: list[int], held: list[bytes], rest: int, idle_s: float, stop: _Stop) -> str:
    """Write `held`, then splice `rest` bytes from the socket `fds[0]` (non-blocking: waits for
    them by poll) into the file `fds[1]`, then close `fds`: "done", "idle" (nothing came for
    `idle_s` seconds), "eof" or "lost"."""
    sock, file = fds
    pipe = os.pipe2(os.O_CLOEXEC)
    try:
        for chunk in held:
            view = memoryview(chunk)
            while view:
                view = view[os.write(file, view) :]
        with contextlib.suppress(OSError):  # a smaller pipe only costs more calls
            fcntl.fcntl(pipe[1], fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        came = time.monotonic()
        while rest:
            if stop():
                return "lost"
            try:
                moved = os.splice(sock, pipe[1], min(rest, _PIPE_SIZE), flags=os.SPLICE_F_MOVE)
            except BlockingIOError:
                if idle_s > 0 and time.monotonic() - came > idle_s:
                    return "idle"
                poller.poll(_POLL_MS)
                continue
            except OSError:  # the client reset its end
                return "lost"
            if moved == 0:
                return "eof"
            came, rest = time.monotonic(), rest - moved
            while moved:
                moved -= os.splice(pipe[0], file, moved, flags=os.SPLICE_F_MOVE)
        return "done"
    finally:
        _close([*pipe, *fds])


def _send_all(fds: list[int], runs: Sequence[Run], stop: _Stop) -> bool:
    """sendfile each run to the socket `fds[0]` (non-blocking: waits for room by poll), then
    close `fds`; whether every byte went before the connection was lost or stalled."""
    sock = fds[0]
    try:
        poller = select.poll()
        poller.register(sock, select.POLLOUT)
        for fd, offset, count in runs:
            stalled = time.monotonic()
            while count:
                if stop():
                    return False
                try:
                    sent = os.sendfile(sock, fd, offset, min(count, _SENDFILE_STEP))
                except BlockingIOError:
                    if time.monotonic() - stalled > send_stall_s():
                        return False
                    poller.poll(_POLL_MS)
                    continue
                except OSError:  # the client reset or closed its end
                    return False
                if sent == 0:
                    raise RuntimeError(f"a file of the answer ended at {offset}")
                offset, count, stalled = offset + sent, count - sent, time.monotonic()
        return True
    finally:
        _close(fds)
