"""Every kind of bad request: a problem+json answer with the right status and code, and no
temporary file left behind."""

from __future__ import annotations

import io
import socket
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.api.conftest import SERVER_ENV, Server, upload_leftovers
from tests.zoo import ZooProgram, archive_bytes, torch_json

LIMIT = int(SERVER_ENV["PT2SERDE_MAX_UPLOAD_BYTES"])


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture(scope="module")
def conv(zoo: dict[str, ZooProgram]) -> bytes:
    return archive_bytes(zoo["conv"].ep)


def _bomb() -> bytes:
    """A .pt2-shaped zip whose one member inflates from ~100 KiB to 100 MiB."""
    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = raw.compress(b"\0" * (100 << 20)) + raw.flush()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("archive/archive_format", "pt2")
    data = bytearray(out.getvalue())
    # Append a deflated member by hand: zipfile cannot write pre-compressed data.
    name = b"archive/data/weights/weight_0"
    crc = zlib.crc32(b"\0" * (100 << 20))
    eocd = data.rfind(b"PK\x05\x06")
    cd_off = struct.unpack_from("<I", data, eocd + 16)[0]
    central, head = bytes(data[cd_off:eocd]), bytes(data[:cd_off])
    local = struct.pack(
        "<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(body), 100 << 20, len(name), 0
    )
    offset = len(head)
    entry = struct.pack(
        "<IHHHHHHIIIHHHHHII",
        0x02014B50,
        20,
        20,
        0,
        8,
        0,
        0,
        crc,
        len(body),
        100 << 20,
        len(name),
        0,
        0,
        0,
        0,
        0,
        offset,
    )
    central += entry + name
    new_head = head + local + name + body
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 2, 2, len(central), len(new_head), 0)
    return new_head + central + end


def _multipart_missing_boundary() -> tuple[bytes, dict[str, str]]:
    return b"--x\r\n", {"Content-Type": "multipart/form-data"}


CASES: list[tuple[str, dict[str, Any], int, str]] = [
    (
        "wrong-media",
        {"content": b"hello", "headers": {"Content-Type": "text/plain"}},
        415,
        "unsupported-media-type",
    ),
    (
        "no-media",
        {"content": b"hello", "headers": {"Content-Type": ""}},
        415,
        "unsupported-media-type",
    ),
    (
        "empty-body",
        {"content": b"", "headers": {"Content-Type": "application/zip"}},
        400,
        "bad-request",
    ),
    (
        "not-a-zip",
        {"content": b"not a zip at all", "headers": {"Content-Type": "application/zip"}},
        422,
        "archive-not-zip",
    ),
    (
        "cut-zip",
        {"content": b"PK\x03\x04garbage", "headers": {"Content-Type": "application/zip"}},
        422,
        "archive-truncated",
    ),
    (
        "malformed-json",
        {"content": b'{"graph_module": ', "headers": {"Content-Type": "application/json"}},
        422,
        "invalid-document",
    ),
    (
        "no-boundary",
        {"content": b"--x\r\n", "headers": {"Content-Type": "multipart/form-data"}},
        400,
        "bad-multipart",
    ),
    (
        "bad-multipart",
        {"content": b"garbage", "headers": {"Content-Type": "multipart/form-data; boundary=zz"}},
        400,
        "bad-multipart",
    ),
    (
        "opaque-unknown",
        {"content": b"\x01\x02\x03", "headers": {"Content-Type": "application/octet-stream"}},
        415,
        "unsupported-media-type",
    ),
]


def _check(answer: httpx.Response, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert body["code"] == code
    assert body["status"] == status
    assert body["type"].endswith("/" + code)
    assert body["title"]
    assert body["detail"]
    assert "Traceback" not in answer.text


@pytest.mark.parametrize(("case", "request_", "status", "code"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("endpoint", ["/v1/validate", "/v1/canonicalize"])
def test_bad_bodies(
    case: str,
    request_: dict[str, Any],
    status: int,
    code: str,
    endpoint: str,
    client: httpx.Client,
    server: Server,
) -> None:
    _check(client.post(endpoint, **request_), status, code)
    assert upload_leftovers(server) == []


def test_truncated_archive(client: httpx.Client, conv: bytes, server: Server) -> None:
    answer = client.post(
        "/v1/serialize", content=conv[: len(conv) // 2], headers={"Content-Type": "application/zip"}
    )
    _check(answer, 422, "archive-truncated")
    assert upload_leftovers(server) == []


def test_zip_bomb(client: httpx.Client, server: Server) -> None:
    answer = client.post(
        "/v1/serialize", content=_bomb(), headers={"Content-Type": "application/zip"}
    )
    _check(answer, 422, "archive-ratio-too-high")
    assert upload_leftovers(server) == []


def test_declared_length_over_limit(client: httpx.Client, server: Server) -> None:
    answer = client.post(
        "/v1/validate", content=b"0" * (LIMIT + 1), headers={"Content-Type": "application/zip"}
    )
    _check(answer, 413, "payload-too-large")
    assert upload_leftovers(server) == []


def test_streamed_body_over_limit_stops_early(server: Server) -> None:
    """A chunked body with no length: the server answers 413 before the client sends it all."""
    host, port = server.url.removeprefix("http://").split(":")
    chunk = b"\0" * (1 << 20)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/zip\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        sock.settimeout(0.05)
        answer = b""
        while sent < 8 * LIMIT and not answer:
            try:
                sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sent += len(chunk)
                answer = sock.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.settimeout(30)
        while b"payload-too-large" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"payload-too-large" in answer
    assert sent <= 2 * LIMIT, f"the server read {sent} bytes past a {LIMIT}-byte limit"
    assert upload_leftovers(server) == []


def test_unknown_query_value(client: httpx.Client, zoo: dict[str, ZooProgram]) -> None:
    answer = client.post(
        "/v1/validate",
        params={"level": "bogus"},
        content=torch_json(zoo["conv"].ep),
        headers={"Content-Type": "application/json"},
    )
    _check(answer, 422, "request-invalid")
    assert answer.json()["errors"][0]["path"] == "/query/level"


def test_not_found_and_method(client: httpx.Client) -> None:
    _check(client.get("/v1/nothing"), 404, "not-found")
    _check(client.get("/v1/validate"), 405, "method-not-allowed")
    two_routes = client.put("/v1/schema/diff")
    _check(two_routes, 405, "method-not-allowed")
    assert two_routes.headers["allow"] == "GET, POST"
    _check(client.get("/v1/schema/versions/9.9"), 404, "unknown-schema-version")


def test_serialize_needs_an_archive(client: httpx.Client, zoo: dict[str, ZooProgram]) -> None:
    answer = client.post(
        "/v1/serialize",
        content=torch_json(zoo["conv"].ep),
        headers={"Content-Type": "application/json"},
    )
    _check(answer, 415, "unsupported-media-type")


def test_deserialize_without_weights(client: httpx.Client, conv: bytes) -> None:
    bundle = client.post("/v1/serialize", params={"weights": "safetensors"}, files={"file": conv})
    with zipfile.ZipFile(io.BytesIO(bundle.content)) as zf:
        document = orjson.loads(zf.read("documents/model.json"))
    answer = client.post("/v1/deserialize", files={"document": orjson.dumps(document)})
    _check(answer, 422, "weights-missing")
    assert answer.json()["detail"].startswith("no weights given")
    assert [e["code"] for e in answer.json()["errors"]] == ["weight-missing"] * 4


def test_other_major_refused(client: httpx.Client, zoo: dict[str, ZooProgram]) -> None:
    doc = orjson.loads(torch_json(zoo["conv"].ep))
    doc["schema_version"] = {"major": 9, "minor": 0}
    answer = client.post(
        "/v1/canonicalize", content=orjson.dumps(doc), headers={"Content-Type": "application/json"}
    )
    _check(answer, 409, "unsupported-schema-major")
