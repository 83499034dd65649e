"""Downloads through a real server: a client that reads none of an archive is dropped after the
send stall, whichever way the answer is sent, and one address holds at most its cap of open
downloads (429 too-many-downloads with Retry-After past it, a slot again once one ends)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import torch

from tests.registry.conftest import (
    RegistryServer,
    make_backend,
    push_exported,
    start_registry_server,
    stop_registry_server,
    warm,
)

CAP = 2
STALL_S = 2


@pytest.fixture(scope="module")
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RegistryServer]:
    """One HTTP process (the cap is per process) with a short send stall and a cap of 2."""
    backend = make_backend(request, tmp_path_factory.mktemp("downloads"), "sqlite")
    env = {
        "PT2SERDE_HTTP_WORKERS": "1",
        "PT2SERDE_HTTP_MAX_DOWNLOADS_PER_CLIENT": str(CAP),
        "PT2SERDE_HTTP_SEND_STALL_S": str(STALL_S),
    }
    server = start_registry_server(backend, env)
    try:
        warm(server)
        # 8 MiB of weights: more than socket buffers hold
        program = torch.export.export(torch.nn.Linear(1024, 2048), (torch.randn(1, 1024),))
        push_exported(server, "big", program)
        yield server
    finally:
        stop_registry_server(server)


ARCHIVE = "/v1/models/big/versions/1/archive"


def _stalled(server: RegistryServer, extra: str) -> socket.socket:
    """A connection that asks for the archive (with `extra` header lines) and reads nothing."""
    address = urlsplit(server.url)
    conn = socket.create_connection((address.hostname, address.port), timeout=30)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    conn.sendall(f"GET {ARCHIVE} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
    return conn


def _drained(conn: socket.socket) -> tuple[bytes, int]:
    """The answer's head and how many bytes came in all, until the server closed."""
    data, total = b"", 0
    with contextlib.suppress(ConnectionResetError):
        while chunk := conn.recv(1 << 20):
            total += len(chunk)
            if len(data) < 4096:
                data += chunk
    conn.close()
    return data.partition(b"\r\n\r\n")[0], total


# a whole archive goes out from its file by the kernel; a range is streamed by the app
@pytest.mark.parametrize("ranged", [False, True])
def test_stalled_downloads_are_capped_per_client_and_dropped(
    served: RegistryServer, ranged: bool
) -> None:
    with served.client() as client:
        size = len(client.get(ARCHIVE).content)
        assert size > 8 << 20
        headers = {"Range": f"bytes=1-{size - 2}"} if ranged else {}
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        held = [_stalled(served, extra) for _ in range(CAP)]
        time.sleep(0.5)
        refused = client.get(ARCHIVE, headers=headers)
        assert (refused.status_code, refused.json()["code"]) == (429, "too-many-downloads")
        assert refused.headers["retry-after"] == "1"
        started = time.monotonic()
        time.sleep(STALL_S + 1)  # reading nothing past the server's stall limit
        for conn in held:
            head, total = _drained(conn)
            assert head.startswith(b"HTTP/1.1 206" if ranged else b"HTTP/1.1 200"), head[:100]
            assert total < size
        assert time.monotonic() - started < STALL_S + 10
        # the slots are free again once the stalled answers are dropped
        again = client.get(ARCHIVE, headers=headers)
        assert again.status_code == (206 if ranged else 200)
        assert len(again.content) == (size - 2 if ranged else size)
