"""HEAD through a real server: every GET route answers it as GET does (status and headers), with
no body, whether the answer is a page, JSON, a problem, a file sent from disk or one streamed from
S3; the connection stays usable for the next request."""

from __future__ import annotations

import socket
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

# headers two answers to the same request may differ in
_PER_ANSWER = {"date", "x-request-id"}


@pytest.fixture(scope="module", params=["sqlite", "sqlite-s3"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RegistryServer]:
    """A registry with one pushed model (an alias on its version), on local disk or S3."""
    backend = make_backend(request, tmp_path_factory.mktemp("head"))
    server = start_registry_server(backend, {"PT2SERDE_HTTP_WORKERS": "1"})
    try:
        warm(server)
        program = torch.export.export(torch.nn.Linear(512, 1024), (torch.randn(1, 512),))
        push_exported(server, "lin", program)
        yield server
    finally:
        stop_registry_server(server)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/healthz", 200),
        ("/openapi.json", 200),
        ("/docs", 200),
        ("/ui/", 200),
        ("/v1/schema/versions", 200),
        ("/v1/models", 200),
        ("/v1/models/lin/versions", 200),
        ("/v1/models/lin/versions/1", 200),
        ("/v1/models/lin/versions/1/archive", 200),
        ("/v1/models/lin/versions/9/archive", 404),
        ("/no/such/route", 404),
    ],
)
def test_head_answers_as_get_without_a_body(served: RegistryServer, path: str, status: int) -> None:
    with served.client() as client:
        got = client.get(path)
        head = client.head(path)
    assert got.status_code == status, got.text[:300]
    assert head.status_code == status
    assert head.content == b""
    same = {k: v for k, v in got.headers.items() if k not in _PER_ANSWER}
    assert {k: v for k, v in head.headers.items() if k not in _PER_ANSWER} == same
    if status == 200 and "content-length" in same:
        assert int(same["content-length"]) == len(got.content)


def test_head_of_a_range_says_what_get_sends(served: RegistryServer) -> None:
    path = "/v1/models/lin/versions/1/archive"
    with served.client() as client:
        got = client.get(path, headers={"Range": "bytes=100-1099"})
        head = client.head(path, headers={"Range": "bytes=100-1099"})
    assert got.status_code == head.status_code == 206
    assert head.headers["content-range"] == got.headers["content-range"]
    assert head.headers["content-length"] == "1000" == str(len(got.content))
    assert head.content == b""


def test_a_post_route_still_refuses_head(served: RegistryServer) -> None:
    with served.client() as client:
        head = client.head("/v1/validate")
    assert head.status_code == 405
    assert head.headers["allow"] == "POST"


def test_no_body_bytes_go_out_and_the_connection_serves_the_next_request(
    served: RegistryServer,
) -> None:
    """On the wire: HEAD of the 2 MiB archive, then GET /healthz on the same connection; what
    comes back is two heads and the health answer's body, nothing of the archive."""
    address = urlsplit(served.url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as conn:
        conn.sendall(
            b"HEAD /v1/models/lin/versions/1/archive HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        data = b""
        while chunk := conn.recv(1 << 16):
            data += chunk
    first, _, rest = data.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200")
    assert int(dict(_fields(first))[b"content-length"]) > 2 << 20
    second, _, body = rest.partition(b"\r\n\r\n")
    assert second.startswith(b"HTTP/1.1 200"), rest[:200]
    assert body == b'{"status":"ok"}'


def _fields(head: bytes) -> Iterator[tuple[bytes, bytes]]:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        yield name.strip().lower(), value.strip()
