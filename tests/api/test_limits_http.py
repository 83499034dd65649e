"""No 500 from the HTTP layer: long multipart boundaries, part floods, version references past
int()'s digit limit, and Range headers with several or no satisfiable ranges."""

from __future__ import annotations

import email.parser
import email.policy
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import torch

from app.http.uploads import MAX_PART_HEADER_BYTES
from app.settings import Settings
from tests.api.conftest import Server, upload_leftovers
from tests.registry.conftest import rewrite_member
from tests.zoo import archive_bytes

ZIP = {"Content-Type": "application/zip"}
JSON = {"Content-Type": "application/json"}
DOC = b'{"schema_version": {"major": 8, "minor": 20}}'


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture(scope="module")
def stored(client: httpx.Client) -> bytes:
    """A pushed version 1 of model `limits`: its archive as the registry serves it."""
    program = torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
    pushed = client.post("/v1/models/limits/versions", content=archive_bytes(program), headers=ZIP)
    assert pushed.status_code == 201, pushed.text
    return client.get("/v1/models/limits/versions/1/archive").content


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    return body


def form(boundary: str, parts: list[tuple[str, bytes]], extra: str = "") -> bytes:
    pieces = []
    for name, data in parts:
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n{extra}\r\n'
        pieces += [head.encode(), data, b"\r\n"]
    return b"".join([*pieces, f"--{boundary}--\r\n".encode()])


def port(client: httpx.Client) -> int:
    found = client.base_url.port
    assert found is not None
    return found


def multipart(boundary: str) -> dict[str, str]:
    return {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def multipart_routes(client: httpx.Client) -> list[str]:
    spec = client.get("/openapi.json").json()
    return [
        path.replace("{name}", "limits")
        for path, item in spec["paths"].items()
        if "multipart/form-data" in item.get("post", {}).get("requestBody", {}).get("content", {})
    ]


def test_a_boundary_over_256_bytes_is_a_bad_multipart_everywhere(
    client: httpx.Client, server: Server
) -> None:
    routes = multipart_routes(client)
    assert len(routes) >= 9, routes
    for length in (257, 300, 5000):
        boundary = "b" * length
        body = form(boundary, [("document", DOC)])
        for route in routes:
            answer = client.post(route, content=body, headers=multipart(boundary))
            problem(answer, 400, "bad-multipart")
    assert upload_leftovers(server) == []


def test_parts_are_capped_in_number_and_header_size(client: httpx.Client) -> None:
    cap = Settings.from_env(None).max_form_parts
    boundary = "cap"
    many = form(boundary, [(f"f{i}", DOC) for i in range(cap + 1)])
    for route in ("/v1/validate?level=schema", "/v1/deserialize"):
        problem(
            client.post(route, content=many, headers=multipart(boundary)), 413, "too-many-parts"
        )
    # 200k parts were once read to the end (+146 MB): now the answer comes at the cap, before the
    # client has sent more than the first 64 KiB
    flood = form(boundary, [(f"f{i}", b"x") for i in range(200_000)])
    head = (
        f"POST /v1/validate HTTP/1.1\r\nHost: t\r\nContent-Length: {len(flood)}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port(client)), timeout=10) as raw:
        raw.sendall(head.encode() + flood[: 1 << 16])
        answer = b""
        while b'"errors"' not in answer and (chunk := raw.recv(1 << 16)):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b'"code":"too-many-parts"' in answer
    within = form(boundary, [("document", DOC)])
    assert client.post("/v1/validate", content=within, headers=multipart(boundary)).is_success
    headers = "".join(f"X-{i}: {'v' * 100}\r\n" for i in range(MAX_PART_HEADER_BYTES // 100))
    bloated = form(boundary, [("document", DOC)], headers)
    problem(
        client.post("/v1/validate", content=bloated, headers=multipart(boundary)),
        400,
        "bad-multipart",
    )


@pytest.mark.parametrize("ref", ["9" * 5000, "0" * 5000 + "1" * 4400, "1" * 4301, "4" * 11])
def test_a_version_number_past_the_digit_limit_is_not_found(
    client: httpx.Client, stored: bytes, ref: str
) -> None:
    base = "/v1/models/limits/versions"
    problem(client.get(f"{base}/{ref}"), 404, "version-not-found")
    problem(client.get(f"{base}/{ref}/archive"), 404, "version-not-found")
    problem(client.delete(f"{base}/{ref}", params={"reason": "x"}), 404, "version-not-found")
    problem(client.put(f"{base}/{ref}/tags/k", json={"value": "v"}), 404, "version-not-found")
    diff = client.get(f"{base}/1/diff", params={"against": ref})
    problem(diff, 404, "version-not-found")
    leading_zeros = client.get(f"{base}/{'0' * 5000}1")
    assert leading_zeros.status_code == 200
    assert leading_zeros.json()["version"] == 1


def byteranges(answer: httpx.Response) -> list[tuple[str, bytes]]:
    """The (Content-Range, bytes) of each part of a multipart/byteranges answer."""
    head = f"Content-Type: {answer.headers['content-type']}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + answer.content)
    assert message.is_multipart()
    out = []
    for part in message.iter_parts():
        payload = part.get_payload(decode=True)
        assert isinstance(payload, bytes)
        out.append((str(part["Content-Range"]), payload))
    return out


def test_range_requests(client: httpx.Client, stored: bytes) -> None:
    url = "/v1/models/limits/versions/1/archive"
    size = len(stored)
    # several ranges: multipart/byteranges, ascending, overlapping or adjacent ones merged
    several = client.get(url, headers={"Range": "bytes=-2, 0-1,5-6"})
    assert several.status_code == 206
    assert several.headers["content-type"].startswith("multipart/byteranges; boundary=")
    assert int(several.headers["content-length"]) == len(several.content)
    assert byteranges(several) == [
        (f"bytes 0-1/{size}", stored[0:2]),
        (f"bytes 5-6/{size}", stored[5:7]),
        (f"bytes {size - 2}-{size - 1}/{size}", stored[-2:]),
    ]
    merged = client.get(url, headers={"Range": "bytes=0-5,3-9,10-12"})
    assert (merged.status_code, merged.content) == (206, stored[:13])
    assert merged.headers["content-range"] == f"bytes 0-12/{size}"
    # ranges that start past the end are left out; when none is left: 416 with the size
    partly = client.get(url, headers={"Range": f"bytes={size}-,2-3"})
    assert (partly.status_code, partly.content) == (206, stored[2:4])
    for header in (f"bytes={size}-", "bytes=-0", f"bytes={'9' * 5000}-", f"bytes={size}-,-0"):
        refused = client.get(url, headers={"Range": header})
        problem(refused, 416, "range-not-satisfiable")
        assert refused.headers["content-range"] == f"bytes */{size}"
    blob = client.get(
        f"/v1/blobs/{several.headers['etag'].strip(chr(34))}", headers={"Range": f"bytes={size}-"}
    )
    assert blob.status_code == 416
    assert blob.headers["content-range"] == f"bytes */{size}"
    # malformed, another unit, too many ranges, or a stale If-Range: the whole body
    for header in ("bytes=5-1", "items=0-1", "bytes=x-", ",".join(["bytes=0-0"] + ["2-2"] * 16)):
        whole = client.get(url, headers={"Range": header})
        assert (whole.status_code, whole.content) == (200, stored), header
    stale = client.get(url, headers={"Range": f"bytes={size}-", "If-Range": '"old"'})
    assert (stale.status_code, stale.content) == (200, stored)


def max_archive(operands: int, nested: bool = False) -> bytes:
    """A dynamic-shape program whose first symbolic size is Max(s0, ..., s<operands - 1>)."""
    x = torch.randn(4, 3)
    dim = torch.export.Dim("n", min=2)
    program = torch.export.export(torch.nn.ReLU(), (x,), dynamic_shapes=({0: dim},))
    symbols = [f"s{i}" for i in range(operands)]
    half = operands // 2
    if nested:
        expr = f"Max(Max({','.join(symbols[:half])}),Max({','.join(symbols[half:])}))"
    else:
        expr = f"Max({','.join(symbols)})"

    def change(data: bytes) -> bytes:
        doc = json.loads(data)
        for meta in doc["graph_module"]["graph"]["tensor_values"].values():
            for size in meta["sizes"]:
                if "as_expr" in size:
                    size["as_expr"]["expr_str"] = expr
                    return json.dumps(doc).encode()
        raise AssertionError("no symbolic size")

    return rewrite_member(archive_bytes(program), "models/model.json", change)


@pytest.mark.parametrize(("operands", "nested"), [(2500, False), (64, False), (40, True)])
def test_a_huge_max_is_refused_quickly_and_others_are_served(
    client: httpx.Client, server: Server, operands: int, nested: bool
) -> None:
    archive = max_archive(operands, nested)
    assert len(archive) < 64 * 1024
    timings: dict[str, float] = {}

    def normal() -> None:
        with server.client(timeout=30) as other:
            time.sleep(0.2)
            start = time.monotonic()
            answer = other.post("/v1/validate?level=schema", content=DOC, headers=JSON)
            timings["normal"] = time.monotonic() - start
            assert answer.status_code == 200, answer.text

    meanwhile = threading.Thread(target=normal)
    meanwhile.start()
    start = time.monotonic()
    answer = client.post("/v1/validate?level=torch", content=archive, headers=ZIP)
    elapsed = time.monotonic() - start
    meanwhile.join()
    assert elapsed < 5, elapsed
    assert timings["normal"] < 2, timings
    assert answer.status_code == 200, answer.text
    codes = {f["code"] for f in answer.json()["findings"]}
    assert "unsafe-expression" in codes, codes
