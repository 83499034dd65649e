"""Slow clients through the real server on loopback: a stalled body is cut off after the body
idle timeout, and a slowloris holding 200 connections does not delay a normal request."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.api.conftest import SERVER_ENV, Server, start_server, stop_server

IDLE_S = 1.0
DOC = b'{"schema_version": {"major": 8, "minor": 20}}'


@pytest.fixture(scope="module")
def slow_server() -> Iterator[Server]:
    """A server with a one-second body idle timeout."""
    running = start_server({**SERVER_ENV, "PT2SERDE_BODY_IDLE_TIMEOUT_S": str(IDLE_S)})
    try:
        yield running
    finally:
        stop_server(running)


def connect(server: Server) -> socket.socket:
    port = httpx.URL(server.url).port
    assert port is not None
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def answer_of(conn: socket.socket) -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and when it closed it."""
    out = b""
    while chunk := conn.recv(65536):
        out += chunk
    return out, time.monotonic()


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Length: 1000\r\n\r\n" + DOC,
        b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(DOC):x}\r\n".encode() + DOC + b"\r\n",
    ],
    ids=["short-body", "stalled-chunks"],
)
def test_a_stalled_body_is_cut_off(slow_server: Server, head: bytes) -> None:
    with connect(slow_server) as conn:
        start = time.monotonic()
        conn.sendall(
            b"POST /v1/validate?level=schema HTTP/1.1\r\nHost: t\r\n"
            b"Content-Type: application/json\r\n" + head
        )
        answer, closed = answer_of(conn)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert b'"code":"body-timeout"' in answer
    # cut off after the idle timeout, and the connection closed soon after the answer
    assert IDLE_S <= closed - start < IDLE_S + 8, closed - start


def test_a_slowloris_does_not_delay_others(slow_server: Server) -> None:
    held: list[socket.socket] = []
    try:
        for _ in range(200):
            conn = connect(slow_server)
            conn.sendall(b"POST /v1/validate HTTP/1.1\r\nHost: t\r\nX-Slow: ")
            held.append(conn)
        with slow_server.client(timeout=10) as client:
            for _ in range(5):
                start = time.monotonic()
                answer = client.post(
                    "/v1/validate?level=schema",
                    content=DOC,
                    headers={"Content-Type": "application/json"},
                )
                assert answer.status_code == 200, answer.text
                assert time.monotonic() - start < 1.0
    finally:
        for conn in held:
            conn.close()
