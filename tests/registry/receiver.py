"""A webhook receiver on loopback for the tests: it checks every delivery's signature the way
docs/registry.md tells receivers to, and records what arrived and what it answered."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: How old a signature's timestamp may be before the receiver calls it a replay.
TOLERANCE_S = 300


def verify(secret: str, header: str, body: bytes) -> bool:
    """docs/registry.md's check: HMAC-SHA256 over "<t>." + body, in constant time, fresh."""
    fields = dict(part.split("=", 1) for part in header.split(","))
    timestamp = int(fields["t"])
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    fresh = abs(time.time() - timestamp) <= TOLERANCE_S
    return fresh and hmac.compare_digest(expected.hexdigest(), fields["v1"])


@dataclass
class Received:
    """One request the receiver got, and what it answered."""

    event_id: str
    delivery: str
    kind: str
    body: dict[str, Any]
    raw: bytes
    signature: str
    answered: int


@dataclass
class Receiver:
    """Records requests; `answer` decides each status (it may block to hold a delivery)."""

    url: str
    secrets: list[str] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    bad_signatures: list[bytes] = field(default_factory=list)
    #: requests whose signature held, counted as they arrive (before they are answered)
    arrivals: int = 0
    answer: Callable[[Received], int] = lambda _: 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, raw: bytes, headers: Any) -> int:
        """Check and record one delivery; the status to answer with."""
        signature = headers.get("X-Pt2serde-Signature", "")
        if not any(verify(s, signature, raw) for s in self.secrets):
            with self.lock:
                self.bad_signatures.append(raw)
            return 401
        got = Received(
            event_id=headers["X-Pt2serde-Event-Id"],
            delivery=headers["X-Pt2serde-Delivery"],
            kind=headers["X-Pt2serde-Event"],
            body=json.loads(raw),
            raw=raw,
            signature=signature,
            answered=0,
        )
        with self.lock:
            self.arrivals += 1
        status = self.answer(got)
        got.answered = status
        with self.lock:
            self.received.append(got)
        return status

    def delivered(self) -> dict[str, Received]:
        """The requests answered 2xx, by event id (the last one of each)."""
        with self.lock:
            return {r.event_id: r for r in self.received if 200 <= r.answered < 300}

    def wait_for(self, check: Callable[[Receiver], bool], timeout_s: float = 30.0) -> None:
        """Return once `check` holds; fail after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not check(self):
            assert time.monotonic() < deadline, f"timed out; received {len(self.received)}"
            time.sleep(0.05)


@contextmanager
def receiver() -> Iterator[Receiver]:
    """A receiver listening on a free loopback port until the block ends."""
    box: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status = box[0].take(raw, self.headers)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the tests read what was recorded."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    box.append(Receiver(f"http://127.0.0.1:{server.server_address[1]}/hook"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
