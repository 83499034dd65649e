"""The HTTP/1.1 protocol the service runs under uvicorn: its httptools parser, plus the two
deadlines uvicorn lacks. A request head (request line and headers) must be complete within
`http_header_timeout_s` of the connection opening or of the previous answer, and a request
body within `body_timeout_s` of its head; past either, the connection gets a 408 problem (when
no answer has begun) and is closed. Without them, a client that sends a byte now and then holds
its connection, and a slot of the connection cap, for as long as it likes.

Its requests run in our `Cycle` (app.http.cycle): bodies held as they came rather than copied
twice per byte, a body received straight into a file, and answers sent from files.

`pt2serde serve` passes this class to uvicorn as its `http` protocol (by name, so that each
HTTP process imports it itself). A reverse proxy in front does the same job too (docker/).
"""

from __future__ import annotations

import asyncio
import functools
import http
import threading
from dataclasses import dataclass

from starlette.responses import Response
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from app.failure import ProblemCode
from app.http.cycle import Cycle
from app.http.problems import problem
from app.settings import Settings

#: How uvicorn names this class: the `http` argument of uvicorn.run.
PROTOCOL = "app.http.protocol:DeadlineProtocol"
#: the problems a late request head and a late body are answered with
DEADLINE_CODES: tuple[ProblemCode, ProblemCode] = ("header-timeout", "body-timeout")
_HEAD_CODE, _BODY_CODE = DEADLINE_CODES


@functools.cache
def _timeouts() -> tuple[float, float]:
    """(header, body) seconds, read once per HTTP process."""
    settings = Settings.from_env()
    return settings.http_header_timeout_s, settings.body_timeout_s


@dataclass(frozen=True)
class HeadLimits:
    """What one request head may hold (`Settings.http_max_head_bytes` and its siblings)."""

    head_bytes: int
    fields: int
    line_bytes: int


@functools.cache
def _head_limits() -> HeadLimits:
    settings = Settings.from_env()
    return HeadLimits(
        settings.http_max_head_bytes,
        settings.http_max_header_fields,
        settings.http_max_header_line_bytes,
    )


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing a head that is over a limit."""


def _closing_answer(response: Response) -> bytes:
    """A complete HTTP/1.1 answer of a problem response that closes the connection."""
    status = http.HTTPStatus(response.status_code)
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        f"content-type: {response.media_type}\r\n"
        f"content-length: {len(response.body)}\r\n"
        "x-content-type-options: nosniff\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + bytes(response.body)


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a request-head deadline and a request-body deadline,
    bodies held as they come, and the `SENDFILE` answer extension."""

    _deadline: asyncio.TimerHandle | None = None
    #: bytes of the request head received so far (None once the head is complete)
    _head_seen: int | None = 0
    _fields = 0
    _line = 0
    #: bytes of request line and header fields parsed so far (a head may arrive in one piece)
    _parsed = 0
    #: why parsing stopped, for the answer uvicorn's parser-error path would give
    _refusal: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the clock on the first request head."""
        self._lost = threading.Event()  # tells the threads moving its bytes that it is gone
        super().connection_made(transport)
        self._arm_head()

    def data_received(self, data: bytes) -> None:
        """Parse as uvicorn does; a head still incomplete past its byte limit is refused (the
        parser would hold all of it in memory first)."""
        if self._head_seen is not None:
            self._head_seen += len(data)
        super().data_received(data)
        limit = _head_limits().head_bytes
        if self._head_seen is not None and self._head_seen > limit:
            self._refuse(f"the request head is over {limit} bytes")

    def on_message_begin(self) -> None:
        """A later request on a kept-alive connection: its head is on the clock too."""
        super().on_message_begin()
        self._fields, self._line, self._parsed = 0, 0, 0
        if self._head_seen is None:
            self._head_seen = 0
        if self._deadline is None:
            self._arm_head()

    def on_url(self, url: bytes) -> None:
        """The request line's target (it may come in pieces)."""
        self._line += len(url)
        self._limit_line("the request line", len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        """One header field, counted and measured before uvicorn keeps it."""
        self._fields += 1
        limits = _head_limits()
        if self._fields > limits.fields:
            self._stop(f"the request has more than {limits.fields} header fields")
        self._line = len(name) + len(value)
        self._limit_line(f"header field {name[:40].decode('latin-1')!r}", self._line)
        super().on_header(name, value)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a head the parser refused, or ours to a head over a limit."""
        refusal, self._refusal = self._refusal, None
        if refusal is None:
            super().send_400_response(msg)
            return
        self._refuse(refusal)

    def _limit_line(self, what: str, added: int) -> None:
        limits = _head_limits()
        self._parsed += added
        if self._line > limits.line_bytes:
            self._stop(f"{what} is over {limits.line_bytes} bytes")
        if self._parsed > limits.head_bytes:
            self._stop(f"the request head is over {limits.head_bytes} bytes")

    def _stop(self, detail: str) -> None:
        self._refusal = detail
        raise _HeadRefused(detail)

    def _refuse(self, detail: str) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(_closing_answer(problem("headers-too-large", detail)))
            self.transport.close()

    def on_headers_complete(self) -> None:
        """The head is in: the body's clock starts."""
        self._head_seen = None
        self._disarm()
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before and type(self.cycle) is RequestResponseCycle:
            Cycle.adopt(self.cycle, self._disarm, self._lost)  # type: ignore[arg-type]
        seconds = _timeouts()[1]
        if seconds > 0 and not self.transport.is_closing():
            detail = f"the body did not arrive within {seconds:g} seconds"
            self._deadline = self.loop.call_later(seconds, self._expired, _BODY_CODE, detail)

    def on_body(self, body: bytes) -> None:
        """Hold the chunk for the app as it came (uvicorn would copy it into a bytearray)."""
        cycle = self.cycle
        if not isinstance(cycle, Cycle):
            super().on_body(body)
            return
        if cycle.response_complete or (self.parser.should_upgrade() and self._should_upgrade()):
            return
        if cycle.hold(body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()

    def on_message_complete(self) -> None:
        """The body is in."""
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        """Answered: the next head's clock starts (uvicorn's keep-alive timeout also runs)."""
        super().on_response_complete()
        if isinstance(self.cycle, Cycle):
            self.cycle.release()
        if not self.transport.is_closing() and self._deadline is None:
            self._arm_head()

    def connection_lost(self, exc: Exception | None) -> None:
        """Gone: no deadline left to enforce, no answer left to send."""
        self._disarm()
        self._lost.set()
        super().connection_lost(exc)
        if isinstance(self.cycle, Cycle):
            self.cycle.release()

    def _arm_head(self) -> None:
        seconds = _timeouts()[0]
        if seconds > 0:
            detail = f"the request head did not arrive within {seconds:g} seconds"
            self._deadline = self.loop.call_later(seconds, self._expired, _HEAD_CODE, detail)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, code: ProblemCode, detail: str) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        # an answer under way (or sent, for a later head) is only cut short, never interleaved
        if cycle is None or cycle.response_complete or not cycle.response_started:
            self.transport.write(_closing_answer(problem(code, detail)))
            if cycle is not None and not cycle.response_complete:
                # the route still reading the body is told the client is gone
                cycle.disconnected = True
                cycle.message_event.set()
        self.transport.close()
