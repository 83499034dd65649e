"""Our request cycle under a real uvicorn server (uvloop, our protocol): a large body spliced
into its file arrives whole and closes its connection; a small one keeps it; answers sent by
sendfile arrive whole and in order, also to a slow reader and on a kept-alive connection; a
client that leaves, mid-upload or mid-answer, leaves no thread or descriptor behind."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.http import cycle, uploads
from app.http.cycle import RECVFILE, SENDFILE, Cycle
from app.http.problems import ServiceError
from app.http.protocol import DeadlineProtocol
from app.http.spliced import SplicedResponse
from app.settings import Settings
from tests.api.conftest import free_port

#: the answer's files: a head and an "upload" of several MiB (more than a socket buffer holds)
HEAD = b"HEAD-BYTES" * 100
UPLOAD = hashlib.sha256(b"seed").digest() * (6 * 1024 * 1024 // 32)
SEGMENTS = [(0, 0, 10), (1, 5, 4 * 1024 * 1024), (0, 10, 990), (1, 0, 5), (1, 4_000_000, 100_000)]
EXPECTED = (
    HEAD[:10]
    + UPLOAD[5 : 5 + 4 * 1024 * 1024]
    + HEAD[10:]
    + UPLOAD[:5]
    + UPLOAD[4_000_000:4_100_000]
)


#: a streamed answer of many MiB (no sendfile), and the chunks its generator has made so far
STREAM_CHUNKS = 100
STREAMED: list[int] = []

#: what the routes run with: a body of 1 KiB or more spliced, cut off after 1 s of silence
SETTINGS = {"": Settings(direct_body_bytes=1024, body_idle_timeout_s=1.0)}


def _app(folder: Path) -> FastAPI:
    app = FastAPI()
    (folder / "head").write_bytes(HEAD)
    (folder / "upload").write_bytes(UPLOAD)

    @app.post("/store")
    async def store(request: Request) -> Response:
        target = folder / f"body-{time.monotonic_ns()}"
        direct = RECVFILE in request.scope.get("extensions", {})
        try:
            size = await uploads.store_body(request, target, SETTINGS[""], "")
        except ServiceError as exc:
            return JSONResponse({"code": exc.code}, status_code=400)
        if direct and size >= SETTINGS[""].direct_body_bytes:
            assert await request.body() == b""  # all of it went into the file
        data = target.read_bytes()
        target.unlink()
        digest = hashlib.sha256(data).hexdigest()
        return JSONResponse({"size": size, "sha256": digest, "direct": direct})

    @app.get("/runs")
    async def runs(request: Request) -> Response:
        offered = SENDFILE in request.scope.get("extensions", {})
        files = [folder / "head", folder / "upload"]
        answer = SplicedResponse(SEGMENTS, files, "application/zip", "program.pt2")
        answer.headers["x-sendfile"] = str(offered).lower()
        return answer

    @app.get("/stream")
    async def stream() -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(STREAM_CHUNKS):
                STREAMED.append(len(UPLOAD))
                yield UPLOAD

        return StreamingResponse(chunks(), media_type="application/octet-stream")

    return app


def _serve(folder: Path, **tls: str) -> Iterator[tuple[str, int]]:
    port = free_port()
    config = uvicorn.Config(
        _app(folder), host="127.0.0.1", port=port, http=DeadlineProtocol, loop="uvloop", **tls
    )
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    while not running.started:
        time.sleep(0.01)
    yield "127.0.0.1", port
    running.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    yield from _serve(tmp_path_factory.mktemp("cycle"))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, Path]]:
    """The same app served over TLS, with a self-signed certificate for 127.0.0.1."""
    folder = tmp_path_factory.mktemp("cycle-tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    for host, port in _serve(folder, ssl_certfile=str(cert), ssl_keyfile=str(key)):
        yield host, port, cert


def _request(address: tuple[str, int], head: bytes, body: bytes = b"") -> socket.socket:
    conn = socket.create_connection(address, timeout=20)
    conn.sendall(head + body)
    return conn


def _answer(conn: socket.socket, *, slow: bool = False) -> tuple[bytes, bytes]:
    """One answer's head and body (by its Content-Length) from `conn`."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))[15:]
    )
    while len(body) < length:
        if slow:
            time.sleep(0.001)
        chunk = conn.recv(16384 if slow else 1 << 20)
        assert chunk, "the connection closed mid-answer"
        body += chunk
    return head, body


def _post(size: int) -> bytes:
    return f"POST /store HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n".encode()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_large_body_is_spliced_whole_and_closes_its_connection(
    server: tuple[str, int],
) -> None:
    body = UPLOAD[: 5 * 1024 * 1024 + 3]
    with _request(server, _post(len(body)), body) as conn:
        head, answer = _answer(conn)
        assert b"connection: close" in head.lower()
        assert conn.recv(1) == b""  # closed after the answer
    expected = hashlib.sha256(body).hexdigest()
    assert answer == (b'{"size":%d,"sha256":"%s","direct":true}' % (len(body), expected.encode()))


def test_small_bodies_keep_their_connection(
    server: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(SETTINGS, "", Settings(direct_body_bytes=1 << 20))
    with socket.create_connection(server, timeout=20) as conn:
        for size in (1, 70_000, 300_000):
            body = UPLOAD[:size]
            conn.sendall(_post(size) + body)
            head, answer = _answer(conn)
            assert b"connection: close" not in head.lower()
            assert hashlib.sha256(body).hexdigest().encode() in answer


def test_answers_are_sent_whole_in_order_and_keep_their_connection(
    server: tuple[str, int],
) -> None:
    with socket.create_connection(server, timeout=20) as conn:
        for slow in (False, True, False):
            conn.sendall(b"GET /runs HTTP/1.1\r\nHost: t\r\n\r\n")
            head, body = _answer(conn, slow=slow)
            assert head.startswith(b"HTTP/1.1 200 ")
            assert body == EXPECTED


def _moving() -> bool:
    """Whether a thread is still sending or receiving for a request."""
    names = {"_send_all", "_receive_all"}
    for frame in sys._current_frames().values():
        while frame is not None:
            if frame.f_code.co_name in names and frame.f_code.co_filename.endswith("cycle.py"):
                return True
            frame = frame.f_back  # type: ignore[assignment]
    return False


def _settled(before: int) -> bool:
    """Whether, within a few seconds, no thread moves bytes and no descriptor is left open."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if _fds() <= before and not _moving():
            return True
        time.sleep(0.05)
    return False


def test_a_client_that_leaves_mid_answer_leaves_nothing_behind(server: tuple[str, int]) -> None:
    with _request(server, b"GET /runs HTTP/1.1\r\nHost: t\r\n\r\n") as warm:
        _answer(warm)  # the pool's threads started
    before = _fds()
    conn = _request(server, b"GET /runs HTTP/1.1\r\nHost: t\r\n\r\n")
    conn.recv(1000)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    conn.close()  # a reset, with most of the answer unsent
    assert _settled(before)


def test_a_client_that_leaves_mid_upload_leaves_nothing_behind(server: tuple[str, int]) -> None:
    before = _fds()
    conn = _request(server, _post(10 * 1024 * 1024), UPLOAD[: 2 * 1024 * 1024])
    time.sleep(0.2)
    conn.close()
    assert _settled(before)


def test_a_stalled_large_body_times_out(server: tuple[str, int]) -> None:
    with _request(server, _post(10 * 1024 * 1024), UPLOAD[:100_000]) as conn:
        started = time.monotonic()
        head, answer = _answer(conn)
        assert 1.0 <= time.monotonic() - started < 3.0  # the route's idle limit: 1 s
    assert head.startswith(b"HTTP/1.1 400 ")
    assert answer == b'{"code":"body-timeout"}'


def test_a_large_body_waits_for_its_100_continue(server: tuple[str, int]) -> None:
    body = UPLOAD[: 2 * 1024 * 1024]
    head = _post(len(body)).replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    with _request(server, head) as conn:
        assert conn.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.sendall(body)
        _, answer = _answer(conn)
    assert hashlib.sha256(body).hexdigest().encode() in answer
    assert b'"direct":true' in answer


def test_over_tls_bodies_and_answers_take_the_asgi_way(tls_server: tuple[str, int, Path]) -> None:
    """Splice and sendfile move plain bytes past TLS: over TLS the cycle offers neither."""
    host, port, cert = tls_server
    context = ssl.create_default_context(cafile=str(cert))
    body = UPLOAD[: 3 * 1024 * 1024]
    plain = socket.create_connection((host, port), timeout=20)
    with context.wrap_socket(plain, server_hostname=host) as conn:
        conn.sendall(_post(len(body)) + body)
        _, answer = _answer(conn)
        expected = hashlib.sha256(body).hexdigest()
        assert answer == b'{"size":%d,"sha256":"%s","direct":false}' % (
            len(body),
            expected.encode(),
        )
        conn.sendall(b"GET /runs HTTP/1.1\r\nHost: t\r\n\r\n")
        head, answer = _answer(conn)
    assert b"x-sendfile: false" in head.lower()
    assert answer == EXPECTED


def _whole_answer(address: tuple[str, int], head: bytes) -> bytes:
    """Everything the server sends for `head` before it closes the connection."""
    conn = socket.create_connection(address, timeout=20)
    with contextlib.suppress(OSError):  # it may close before all of a huge head is sent
        conn.sendall(head)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := conn.recv(65536):
            data += chunk
    conn.close()
    return data


_STORE = b"POST /store HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n"


def _fields(count: int, size: int) -> bytes:
    return b"".join(b"X-%04d: %s\r\n" % (i, b"v" * size) for i in range(count))


@pytest.mark.parametrize(
    ("head", "detail"),
    [
        (_STORE + _fields(98, 1) + b"\r\nabc", "the request has more than 100 header fields"),
        (_STORE + b"X-Big: " + b"v" * 16_380 + b"\r\n\r\nabc", "'X-Big' is over 16384 bytes"),
        (_STORE + _fields(90, 1000) + b"\r\nabc", "the request head is over 65536 bytes"),
        (b"GET /" + b"a" * 16_400 + b" HTTP/1.1\r\n\r\n", "the request line is over 16384"),
        (_STORE + b"X-Huge: " + b"v" * (16 << 20), "the request head is over 65536 bytes"),
    ],
)
def test_a_head_over_a_limit_is_refused_431(
    server: tuple[str, int], head: bytes, detail: str
) -> None:
    answer = _whole_answer(server, head)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b'"code":"headers-too-large"' in answer
    assert detail.encode() in answer


def test_a_head_at_the_limits_is_served(server: tuple[str, int]) -> None:
    # 100 fields in all (Host, Content-Length, Connection and 97 more), one line of 16384 bytes
    head = _STORE + _fields(96, 10) + b"X-Line: " + b"v" * (16_384 - 6) + b"\r\n\r\nabc"
    answer = _whole_answer(server, head)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]


def test_requests_leave_no_reference_cycles(server: tuple[str, int]) -> None:
    """Each request's protocol, cycle and scope (its whole head) go with its connection, by
    reference counting alone: nothing waits for a cycle collection."""
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            answer = _whole_answer(server, _STORE + _fields(90, 100) + b"\r\nabc")
            assert answer.startswith(b"HTTP/1.1 200 ")
        deadline = time.monotonic() + 5
        alive = -1
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = sum(type(o) in (Cycle, DeadlineProtocol) for o in gc.get_objects())
        assert alive == 0
    finally:
        gc.enable()


def test_a_reader_that_takes_nothing_of_a_streamed_answer_is_dropped(
    server: tuple[str, int], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv("PT2SERDE_HTTP_SEND_STALL_S", "1")
    cycle.send_stall_s.cache_clear()
    request.addfinalizer(cycle.send_stall_s.cache_clear)
    STREAMED.clear()
    conn = socket.create_connection(server, timeout=20)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    conn.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(4)  # reads nothing: the server's buffers fill, then its stall clock runs out
    made = len(STREAMED)
    received = 0
    with contextlib.suppress(ConnectionResetError):
        while chunk := conn.recv(1 << 20):
            received += len(chunk)
    conn.close()
    whole = STREAM_CHUNKS * len(UPLOAD)
    assert 0 < received < whole / 2
    # the answer stopped there: its generator was not asked for more
    assert made == len(STREAMED) < STREAM_CHUNKS
