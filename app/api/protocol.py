"""The HTTP/1.1 protocol the service runs under uvicorn: its httptools parser, plus the two
deadlines uvicorn lacks. A request head (request line and headers) must be complete within
`http_header_timeout_s` of the connection opening or of the previous answer, and a request
body within `body_timeout_s` of its head; past either, the connection gets a 408 problem (when
no answer has begun) and is closed. Without them, a client that sends a byte now and then holds
its connection, and a slot of the connection cap, for as long as it likes.

Its requests run in our `Cycle` (app.api.cycle): bodies held as they came rather than copied
twice per byte, a body received straight into a file, and answers sent from files.

`pt2serde serve` passes this class to uvicorn as its `http` protocol (by name, so that each
HTTP process imports it itself). A reverse proxy in front does the same job too (docker/).
"""

from __future__ import annotations

import asyncio
import functools
import http
import threading

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from app.api.cycle import Cycle
from app.api.problems import problem
from app.settings import Settings

#: How uvicorn names this class: the `http` argument of uvicorn.run.
PROTOCOL = "app.api.protocol:DeadlineProtocol"
#: the problems a late request head and a late body are answered with
DEADLINE_CODES = ("header-timeout", "body-timeout")
_HEAD_CODE, _BODY_CODE = DEADLINE_CODES


@functools.cache
def _timeouts() -> tuple[float, float]:
    """(header, body) seconds, read once per HTTP process."""
    settings = Settings.from_env()
    return settings.http_header_timeout_s, settings.body_timeout_s


def _answer_408(code: str, detail: str) -> bytes:
    """A complete HTTP/1.1 408 problem response that closes the connection."""
    response = problem(code, detail)
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

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the clock on the first request head."""
        self._lost = threading.Event()  # tells the threads moving its bytes that it is gone
        super().connection_made(transport)
        self._arm_head()

    def on_message_begin(self) -> None:
        """A later request on a kept-alive connection: its head is on the clock too."""
        super().on_message_begin()
        if self._deadline is None:
            self._arm_head()

    def on_headers_complete(self) -> None:
        """The head is in: the body's clock starts."""
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
        if not self.transport.is_closing() and self._deadline is None:
            self._arm_head()

    def connection_lost(self, exc: Exception | None) -> None:
        """Gone: no deadline left to enforce, no answer left to send."""
        self._disarm()
        self._lost.set()
        super().connection_lost(exc)

    def _arm_head(self) -> None:
        seconds = _timeouts()[0]
        if seconds > 0:
            detail = f"the request head did not arrive within {seconds:g} seconds"
            self._deadline = self.loop.call_later(seconds, self._expired, _HEAD_CODE, detail)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, code: str, detail: str) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        # an answer under way (or sent, for a later head) is only cut short, never interleaved
        if cycle is None or cycle.response_complete or not cycle.response_started:
            self.transport.write(_answer_408(code, detail))
            if cycle is not None and not cycle.response_complete:
                # the route still reading the body is told the client is gone
                cycle.disconnected = True
                cycle.message_event.set()
        self.transport.close()
