"""The service under load: a real uvicorn server on loopback against the library in a loop.

The server is `pt2serde serve` as deployed (one uvicorn process; sync routes run in its thread
pool). Clients are threads of this process, one keep-alive connection each, posting the same
JSON document for a time window (requests in flight at its end are awaited and counted).
The comparison runs the same operation (`operations.check` at the semantic level, or
`operations.canonical`) in a loop in as many forked processes as there were clients, for the
same window. No figure counts unless the server's first answer equals the library's first
output for the same bytes (the report as JSON data; the canonical bytes and program digest).
Server and library windows are taken in turn over `ROUNDS` rounds, each side first in every
other round, and the best window of each side is kept (as the storage rows keep theirs): on a
shared machine one window that meets another process' work decides nothing, and neither side
gets the quieter moments.
"""

from __future__ import annotations

import contextlib
import http.client
import math
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import orjson

from app import operations as ops
from app.cli.serve import STOP_MARGIN_S
from app.settings import Settings
from bench.measure import reset_peak, status_kib
from bench.progress import progress
from tests.processes import alive

ROOT = Path(__file__).resolve().parents[1]
JSON = {"Content-Type": "application/json"}
#: server and library windows taken in turn, the best of each kept
ROUNDS = 3
#: how long a stopping server's processes may outlive its stop time, or the supervisor
LEFTOVER_S = 5.0


#: A response reduced to what must equal the library's output.
Answer = tuple[Any, ...]


@dataclass(frozen=True)
class Endpoint:
    """One endpoint, the library operation it wraps, and how to compare their outputs."""

    name: str
    path: str
    library: Callable[[bytes, Settings], Any]
    library_answer: Callable[[Any], Answer]
    server_answer: Callable[[dict[str, str], bytes], Answer]


def library_validate(body: bytes, settings: Settings) -> Any:
    """What /v1/validate?level=semantic runs for a JSON document."""
    with ops.open_source(body, "json", settings) as source:
        return ops.check(source, "semantic", settings)


def library_canonical(body: bytes, settings: Settings) -> Any:
    """What /v1/canonicalize runs for a JSON document."""
    with ops.open_source(body, "json", settings) as source:
        return ops.canonical(source, settings)


ENDPOINTS = (
    Endpoint(
        "/v1/validate",
        "/v1/validate?level=semantic",
        library_validate,
        lambda report: (report.model_dump(mode="json"),),
        lambda _, body: (orjson.loads(body),),
    ),
    Endpoint(
        "/v1/canonicalize",
        "/v1/canonicalize",
        library_canonical,
        # a JSON document holds no weights: the service gives its graph digest alone
        lambda canonical: (canonical.data, canonical.digests.graph, None),
        lambda headers, body: (
            body,
            headers.get("x-graph-digest"),
            headers.get("x-program-digest"),
        ),
    ),
)


@dataclass
class Server:
    """A running service process on a loopback port."""

    host: str
    port: int
    #: the supervisor, leading a process group of its own
    process: subprocess.Popen[bytes]
    tmp: Path
    #: seconds the server may take to stop once asked (its graceful shutdown plus the margin
    #: after which its HTTP processes kill themselves)
    stop_s: float

    @property
    def pids(self) -> list[int]:
        """The server process and its children (uvicorn workers)."""
        return _tree(self.process.pid)


def _tree(pid: int) -> list[int]:
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):  # a thread that ended since it was listed
            for child in task.read_text().split():
                pids.extend(_tree(int(child)))
    return pids


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(extra: dict[str, str] | None = None) -> Server:
    """`pt2serde serve`, as configured by default (and by the `extra` environment), on a free
    port once healthy."""
    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="pt2serde-bench-"))
    env = {
        **os.environ,
        "PT2SERDE_PORT": str(port),
        "PT2SERDE_DATA_DIR": str(tmp / "data"),
        "TMPDIR": str(tmp),
        "PYTHONPATH": str(ROOT),
        **(extra or {}),
    }
    command = [sys.executable, "-m", "app.cli", "serve"]
    with (tmp / "server.log").open("wb") as log:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True
        )
    # the server's own settings: the process's environment under `extra`
    settings = Settings.from_env(extra)
    stop_s = settings.http_graceful_shutdown_s + STOP_MARGIN_S
    server = Server("127.0.0.1", port, process, tmp, stop_s)
    # healthy once one HTTP process answers; the others may still be starting, and a timing
    # taken then would count their start-up (0.5-1 s of both cores), so every one is awaited
    processes = settings.http_workers or os.cpu_count() or 1
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError((tmp / "server.log").read_text())
        try:
            status, _, _ = _post(server, "GET", "/healthz", b"")
            if status == 200 and _started(tmp / "server.log") >= processes:
                _settle(server, deadline)
                return server
        except OSError:
            pass
        time.sleep(0.2)
    stop_server(server)
    raise RuntimeError("the server did not start in 60 s")


def _started(log: Path) -> int:
    """How many HTTP processes have finished their start-up, as uvicorn logs each."""
    return log.read_text(errors="replace").count("Application startup complete.")


#: a started server has settled when its processes used less than this share of one core...
SETTLED_SHARE = 0.05
#: ...over a window this long (seconds)
SETTLE_WINDOW_S = 0.5


def _settle(server: Server, deadline: float) -> None:
    """Wait (until `deadline` at most) for the server's processes to stop starting: the
    document workers each HTTP process starts go on importing after it takes connections, which
    took both cores for 1-3 s that a timing taken then counted as the service's."""
    used = tree_cpu(server.process.pid)
    while time.monotonic() < deadline:
        time.sleep(SETTLE_WINDOW_S)
        now = tree_cpu(server.process.pid)
        if now - used < SETTLED_SHARE * SETTLE_WINDOW_S:
            return
        used = now


def tree_cpu(root: int) -> float:
    """CPU seconds (user and system) the processes under `root` (itself included) have used."""
    total = 0
    for pid in _tree(root):
        with contextlib.suppress(OSError):  # gone since it was listed
            # the fields after the command's closing parenthesis: utime and stime are 14 and 15
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def stop_server(server: Server) -> None:
    """SIGTERM; SIGKILL to the server's process group if it has not stopped by its stop time (a
    SIGKILLed supervisor alone would leave its HTTP processes to end by their own watch), or if
    any process of its tree outlives it by `LEFTOVER_S` (said on stderr: a bug)."""
    tree = server.pids
    server.process.terminate()
    try:
        server.process.wait(timeout=server.stop_s + LEFTOVER_S)
    except subprocess.TimeoutExpired:
        progress(f"the server did not stop in {server.stop_s + LEFTOVER_S:.0f} s: killed")
        _kill_group(server)
        return
    deadline = time.monotonic() + LEFTOVER_S
    while (left := [pid for pid in tree if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        progress(f"processes of the server outlived it: {left}: killed")
        _kill_group(server)


def _kill_group(server: Server) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait()


def _post(server: Server, method: str, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=600)
    try:
        conn.request(method, path, body=body or None, headers=JSON)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def check(endpoint: Endpoint, server: Load, library: Load) -> str | None:
    """Why the server's first answer differs from the library's first output (None if equal)."""
    if server.errors or library.errors:
        return f"errors: {(server.errors + library.errors)[:2]}"
    if server.answer is None or library.answer is None:
        return "no answer to compare"
    if server.answer != library.answer:
        return f"{endpoint.name} answered other than the library for the same bytes"
    return None


@dataclass
class Load:
    """Completed requests (or calls), their latencies, the wall time, and peak memory."""

    latencies: list[float]
    seconds: float
    errors: list[str]
    #: peak resident set: the server's (all its processes), or the largest library process'.
    peak: int | None
    #: the first answer, reduced for comparison (see `Endpoint`).
    answer: Answer | None = None

    @property
    def rate(self) -> float:
        """Completed requests per second."""
        return len(self.latencies) / self.seconds if self.seconds > 0 else math.nan

    def percentile(self, q: float) -> float:
        """The q-th latency percentile (nearest rank)."""
        ordered = sorted(self.latencies)
        if not ordered:
            return math.nan
        return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


class _Quota:
    """Requests left to start, shared by the client threads."""

    def __init__(self, total: int) -> None:
        self._left = total
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            return True


def http_load(
    server: Server, endpoint: Endpoint, body: bytes, clients: int, window: float, limit: int
) -> Load:
    """`clients` threads posting `body` for `window` seconds (at least one request each)."""
    quota = _Quota(limit)
    start = threading.Barrier(clients + 1)
    latencies: list[float] = []
    errors: list[str] = []
    answers: list[Answer] = []
    lock = threading.Lock()
    deadline = [0.0]

    def client() -> None:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=600)
        start.wait()
        first = True
        try:
            while (first or time.perf_counter() < deadline[0]) and quota.take():
                first = False
                began = time.perf_counter()
                conn.request("POST", endpoint.path, body=body, headers=JSON)
                response = conn.getresponse()
                answer = response.read()
                took = time.perf_counter() - began
                with lock:
                    latencies.append(took)
                    if response.status != 200:
                        errors.append(f"{response.status}: {answer[:120]!r}")
                    elif not answers:
                        headers = {k.lower(): v for k, v in response.getheaders()}
                        answers.append(endpoint.server_answer(headers, answer))
        finally:
            conn.close()

    for pid in server.pids:
        reset_peak(pid)
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline[0] = began + window
    start.wait()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
    peaks = [status_kib("VmHWM", pid) for pid in server.pids]
    peak = sum(p for p in peaks if p is not None) or None
    return Load(latencies, seconds, errors, peak, answers[0] if answers else None)


def _library_child(
    endpoint: Endpoint,
    body: bytes,
    settings: Settings,
    go: Any,
    window: float,
    quota: int,
    conn: Connection,
) -> None:
    # No garbage collection here: it would touch (and copy) every page inherited from the parent.
    base = status_kib("VmRSS")
    can_reset = reset_peak()
    latencies: list[float] = []
    errors: list[str] = []
    answer: Answer | None = None
    conn.send("ready")
    go.wait()
    began = time.perf_counter()
    end = began + window
    while len(latencies) < quota and (not latencies or time.perf_counter() < end):
        started = time.perf_counter()
        try:
            result = endpoint.library(body, settings)
            if answer is None:
                answer = endpoint.library_answer(result)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        latencies.append(time.perf_counter() - started)
    seconds = time.perf_counter() - began
    high = status_kib("VmHWM")
    peak = high - base if can_reset and high is not None and base is not None else None
    conn.send((latencies, seconds, errors, peak, answer))
    conn.close()


def library_load(
    endpoint: Endpoint, body: bytes, settings: Settings, processes: int, window: float, limit: int
) -> Load:
    """The library operation in a loop in `processes` forked processes for `window` seconds.

    The processes start together once all are ready; the wall time is the longest one's.
    """
    context = multiprocessing.get_context("fork")
    go = context.Event()
    quota = max(1, math.ceil(limit / processes))
    pipes = []
    children = []
    for _ in range(processes):
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(
            target=_library_child,
            args=(endpoint, body, settings, go, window, quota, sender),
        )
        child.start()
        sender.close()
        pipes.append(receiver)
        children.append(child)
    for receiver in pipes:
        receiver.recv()
    go.set()
    latencies: list[float] = []
    errors: list[str] = []
    walls: list[float] = []
    peaks: list[int] = []
    answers: list[Answer] = []
    for receiver in pipes:
        lat, seconds, errs, peak, answer = receiver.recv()
        if answer is not None:
            answers.append(answer)
        latencies += lat
        errors += errs
        walls.append(seconds)
        if peak is not None:
            peaks.append(peak)
    for child in children:
        child.join()
    differing = [a for a in answers if a != answers[0]]
    if differing:
        errors.append("the library processes disagree with each other")
    return Load(
        latencies,
        max(walls),
        errors,
        max(peaks) if peaks else None,
        answers[0] if answers else None,
    )


@dataclass(frozen=True)
class Rounds:
    """The best server and library windows of alternating rounds, and each round's rates."""

    server: Load
    library: Load
    #: (server req/s, library req/s) of each round, in order
    rates: list[tuple[float, float]]


def alternating_loads(
    server: Server,
    endpoint: Endpoint,
    body: bytes,
    settings: Settings,
    clients: int,
    window: float,
    limit: int,
    rounds: int = ROUNDS,
) -> Rounds:
    """`http_load` and `library_load` in turn, `rounds` times (the server first in the first
    round, the library first in the second, ...); the best window of each side."""
    servers: list[Load] = []
    libraries: list[Load] = []
    for turn in range(rounds):
        for on_server in (True, False) if turn % 2 == 0 else (False, True):
            if on_server:
                servers.append(http_load(server, endpoint, body, clients, window, limit))
            else:
                libraries.append(library_load(endpoint, body, settings, clients, window, limit))
    rates = [(s.rate, lib.rate) for s, lib in zip(servers, libraries, strict=True)]
    return Rounds(_best(servers), _best(libraries), rates)


def _best(loads: list[Load]) -> Load:
    """The window with the highest rate, with every window's errors, the first answer (the one
    `check` compares) and the highest peak."""
    best = max(loads, key=lambda load: load.rate if not math.isnan(load.rate) else -1.0)
    peaks = [load.peak for load in loads if load.peak is not None]
    return Load(
        best.latencies,
        best.seconds,
        [error for load in loads for error in load.errors],
        max(peaks) if peaks else None,
        loads[0].answer,
    )
