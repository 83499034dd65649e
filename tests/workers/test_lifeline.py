"""No process of `pt2serde serve` outlives it: a SIGKILLed supervisor takes its HTTP processes,
their torch forkservers and workers, document workers and resource tracker with it within
seconds, and the port is free; a SIGTERM stops the server within its graceful shutdown, a request
finished meanwhile answered, one still arriving refused with 503 `server-stopping`."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from app.workers.lifeline import WATCH_INTERVAL_S
from tests.api.conftest import Server, start_server
from tests.conftest import ROOT
from tests.processes import alive, processes

ENV = {
    "PT2SERDE_HTTP_WORKERS": "2",
    "PT2SERDE_WORKERS": "1",
    "PT2SERDE_DOCUMENT_WORKERS": "1",
    "PT2SERDE_HTTP_GRACEFUL_SHUTDOWN_S": "3",
}
GRACE_S = 3.0
#: what every process of a killed server is given to end
GONE_WITHIN_S = 10.0
BODY = b'{"schema_version": {"major": 8, "minor": 0}}'


def session(sid: int) -> list[int]:
    """The live processes of session `sid` (the server leads one of its own: every process it
    started is in it, a replacement started after the snapshot too)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            fields = stat.read_text().rpartition(")")[2].split()
            if fields[0] != "Z" and int(fields[4]) == sid:
                found.append(int(stat.parent.name))
    return found


def left_after(sid: int, pids: list[int], within_s: float) -> list[int]:
    """The processes of `pids` and of session `sid` still alive `within_s` seconds from now (or
    none, as soon as none is)."""
    deadline = time.monotonic() + within_s
    while True:
        left = sorted({pid for pid in pids if alive(pid)} | set(session(sid)))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def listening(port: int) -> bool:
    """Whether something still listens on the loopback port."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen()
        except OSError:
            return True
    return False


@pytest.fixture
def server() -> Iterator[Server]:
    """Two HTTP processes, one of them with its torch pool warmed by a real torch job."""
    running = start_server(ENV)
    try:
        with running.client() as client:
            assert client.get("/readyz").status_code == 200
        roles = [p.role for p in processes(running.process.pid)]
        assert roles.count("HTTP process") == 2, roles
        assert {"torch forkserver", "torch worker", "document worker"} <= set(roles), roles
        yield running
    finally:
        # whatever the outcome, nothing of this test keeps running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(running.process.pid, signal.SIGKILL)
        running.process.wait()


def _port(server: Server) -> int:
    return int(server.url.rpartition(":")[2])


def test_a_killed_supervisor_leaves_nothing(server: Server) -> None:
    tree = [p.pid for p in processes(server.process.pid)]
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait()
    assert left_after(server.process.pid, tree, GONE_WITHIN_S) == []
    assert not listening(_port(server))


def _half_sent(server: Server) -> socket.socket:
    """A connection whose POST has its head and the start of its body sent."""
    conn = socket.create_connection(("127.0.0.1", _port(server)), timeout=30)
    head = (
        "POST /v1/validate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    )
    conn.sendall(head.encode() + BODY[:10])
    return conn


def _answer(conn: socket.socket, rest: bytes, answers: dict[str, bytes], name: str) -> None:
    """Send `rest` of the body (if any), then read until the server closes the connection."""
    data = b""
    with conn, contextlib.suppress(OSError):
        if rest:
            conn.sendall(rest)
        while chunk := conn.recv(65536):
            data += chunk
    answers[name] = data


def test_sigterm_stops_within_the_grace(server: Server) -> None:
    tree = [p.pid for p in processes(server.process.pid)]
    finishing, stalled = _half_sent(server), _half_sent(server)
    time.sleep(0.5)  # both requests reach the service before it is told to stop
    answers: dict[str, bytes] = {}
    began = time.monotonic()
    server.process.terminate()
    time.sleep(0.5)
    threads = [
        threading.Thread(target=_answer, args=(finishing, BODY[10:], answers, "finishing")),
        threading.Thread(target=_answer, args=(stalled, b"", answers, "stalled")),
    ]
    for thread in threads:
        thread.start()
    server.process.wait(timeout=GRACE_S + 30)
    took = time.monotonic() - began
    for thread in threads:
        thread.join(timeout=30)
    assert took < GRACE_S + 5, took
    assert server.process.returncode == 0
    assert left_after(server.process.pid, tree, 5.0) == []
    assert answers["finishing"].startswith(b"HTTP/1.1 200 "), answers["finishing"][:200]
    head, _, body = answers["stalled"].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), answers["stalled"][:200]
    assert b"connection: close" in head.lower()
    assert orjson.loads(body)["code"] == "server-stopping"


def _run(code: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_a_stop_that_hangs_is_ended() -> None:
    done = _run(
        "import time\nfrom app.workers.lifeline import kill_self_after\n"
        "kill_self_after(0.2)\nkill_self_after(60)\ntime.sleep(30)\n"
    )
    assert done.returncode == -signal.SIGKILL


#: A process that starts a watching grandchild and ends; prints what the grandchild told it.
ORPHAN_SCRIPT = """
import os, select, time
from app.workers import lifeline

read, write = os.pipe()
middle = os.fork()
if middle == 0:
    parent = os.getpid()
    if os.fork() == 0:
        def told():
            os.write(write, b"told")
            os._exit(0)

        lifeline.watch_parent(parent, told, "watch")
        time.sleep(30)
        os._exit(1)
    os._exit(0)
os.close(write)
os.waitpid(middle, 0)
began = time.monotonic()
ready, _, _ = select.select([read], [], [], 10)
print(os.read(read, 4).decode() if ready else "silent", round(time.monotonic() - began, 2))
"""


def test_an_orphan_is_told() -> None:
    done = _run(ORPHAN_SCRIPT)
    said, took = done.stdout.split()
    assert said == b"told", done.stderr
    assert float(took) <= 2 * WATCH_INTERVAL_S + 0.5


def test_the_forkserver_exit_hook_stays_out_of_other_processes() -> None:
    # imported outside the forkserver's preload it must not register os._exit(0), which would
    # turn every later exit status into success
    done = _run("import app.workers.forkserver\nraise SystemExit(3)\n")
    assert done.returncode == 3, done.stderr
