"""A mixed load on the service: clients on loopback, each on one keep-alive connection, cycling
through validate at every level, canonicalize and registry pushes of a small and a large
program, for a time window. The figure that must hold is no 5xx at all (a 503 with Retry-After
counts as one too: a busy server answers it only past its queue, which this load should not
reach); the latencies are recorded. tests/api/test_stays_up.py runs it bounded, and
bench/mixed.py for `make bench`'s report.
"""

from __future__ import annotations

import http.client
import math
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

JSON = "application/json"
#: connections of the warm-up round: enough that every HTTP process gets some, almost surely
WARM_CONNECTIONS = 4
ZIP = "application/zip"


@dataclass(frozen=True)
class Call:
    """One kind of request: a label for the report, the path, the body and its media type."""

    label: str
    path: str
    body: bytes
    media: str


def mix(small_doc: bytes, small_zip: bytes, large_doc: bytes, large_zip: bytes) -> list[Call]:
    """Validate at every level, canonicalize and push, each on the small and the large program.
    `{client}` in a push's path is the client's number (each pushes to models of its own)."""
    calls = []
    for size, doc, archive in (("small", small_doc, small_zip), ("large", large_doc, large_zip)):
        for level in ("schema", "semantic"):
            calls.append(Call(f"validate {level} {size}", f"/v1/validate?level={level}", doc, JSON))
        calls.append(Call(f"validate torch {size}", "/v1/validate?level=torch", archive, ZIP))
        calls.append(Call(f"canonicalize {size}", "/v1/canonicalize", doc, JSON))
        calls.append(Call(f"canonicalize {size} .pt2", "/v1/canonicalize", archive, ZIP))
        calls.append(
            Call(f"push {size}", f"/v1/models/load-{{client}}-{size}/versions", archive, ZIP)
        )
    return calls


@dataclass
class Mixed:
    """What a mixed load got: every request's label, status and latency."""

    clients: int
    seconds: float
    done: list[tuple[str, int, float]] = field(default_factory=list)
    #: requests that got no HTTP answer at all (a reset or closed connection)
    lost: list[str] = field(default_factory=list)
    #: the first few 5xx answers: label, status and the start of the body
    failures: list[str] = field(default_factory=list)
    #: 5xx answers and lost requests of the untimed warm-up round
    warm_errors: int = 0

    @property
    def server_errors(self) -> int:
        """Answers with a 5xx status, and requests answered not at all."""
        errors = sum(1 for _, status, _ in self.done if status >= 500) + len(self.lost)
        return errors + self.warm_errors

    def latencies(self, label: str | None = None) -> list[float]:
        """Latencies of the requests labelled `label` (all, for None), sorted."""
        return sorted(t for name, _, t in self.done if label in (None, name))

    def percentile(self, q: float, label: str | None = None) -> float:
        """The q-th latency percentile (nearest rank)."""
        ordered = self.latencies(label)
        if not ordered:
            return math.nan
        return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]

    def statuses(self) -> Counter[int]:
        """How many answers had each status."""
        return Counter(status for _, status, _ in self.done)


def run(
    host: str, port: int, calls: list[Call], clients: int, window: float, max_requests: int
) -> Mixed:
    """`clients` threads cycling through `calls` (each from its own offset) for `window` seconds
    or `max_requests` requests in all; requests in flight at the end are awaited and counted."""
    result = Mixed(clients, 0.0)
    lock = threading.Lock()
    _warm_up(host, port, calls, result, lock)
    began = time.perf_counter()
    deadline = began + window

    def client(index: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=600)
        sent = 0
        try:
            while time.perf_counter() < deadline:
                with lock:
                    if len(result.done) + len(result.lost) >= max_requests:
                        return
                call = calls[(index + sent) % len(calls)]
                sent += 1
                _one(conn, call, index, result, lock)
        finally:
            conn.close()

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    result.seconds = time.perf_counter() - began
    return result


def _warm_up(host: str, port: int, calls: list[Call], out: Mixed, lock: threading.Lock) -> None:
    """Every call once on each of a few connections, untimed: each HTTP process starts its
    worker pools at its first job (a torch worker imports torch), which is not what the load
    measures. Their 5xx still count."""
    warm = Mixed(WARM_CONNECTIONS, 0.0)

    def connection(index: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=600)
        try:
            for call in calls:
                _one(conn, call, index, warm, lock)
        finally:
            conn.close()

    with ThreadPoolExecutor(WARM_CONNECTIONS) as pool:
        list(pool.map(connection, range(WARM_CONNECTIONS)))
    out.warm_errors = warm.server_errors
    out.failures += warm.failures + warm.lost


def _one(
    conn: http.client.HTTPConnection, call: Call, index: int, out: Mixed, lock: threading.Lock
) -> None:
    began = time.perf_counter()
    try:
        conn.request(
            "POST",
            call.path.format(client=index),
            body=call.body,
            headers={"Content-Type": call.media},
        )
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        with lock:
            out.lost.append(f"{call.label}: {type(exc).__name__}: {exc}")
        return
    with lock:
        out.done.append((call.label, response.status, time.perf_counter() - began))
        if response.status >= 500 and len(out.failures) < 5:
            out.failures.append(f"{call.label}: {response.status} {body[:160]!r}")
