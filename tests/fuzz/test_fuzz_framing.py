"""Framing fuzz in the suite: seeded multipart bodies with odd boundaries, part counts and part
headers on every multipart route, hostile values in every path parameter of the API, and odd
Range headers on every route that serves ranges; every answer is a 2xx or a catalogued problem
with its status (a range answer, one RFC 9110 allows), and the server stays healthy."""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import torch

from tests.api.conftest import SERVER_ENV, Server, start_server, stop_server, upload_leftovers
from tests.fuzz.campaign import judge
from tests.fuzz.framing import (
    RawRequest,
    multipart_paths,
    multipart_request,
    path_requests,
    range_requests,
)
from tests.zoo import archive_bytes

SEED = 20261123
MULTIPART_REQUESTS = 240
#: an encoded slash can end a path in "/", which Starlette redirects to the path without it
REDIRECTS = {307, 308}


@pytest.fixture(scope="module")
def framing_server() -> Iterator[Server]:
    """A server of its own, so that what these requests store stays out of other tests."""
    running = start_server(SERVER_ENV)
    try:
        yield running
    finally:
        stop_server(running)


def _send(client: httpx.Client, request: RawRequest) -> httpx.Response:
    return client.request(
        request.method, request.path, headers=dict(request.headers), content=request.body
    )


def _push(client: httpx.Client, model: str) -> None:
    """Store a small program as version 1 of `model`."""
    program = torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
    pushed = client.post(
        f"/v1/models/{model}/versions",
        content=archive_bytes(program),
        headers={"Content-Type": "application/zip"},
    )
    assert pushed.status_code == 201, pushed.text


def test_framing_and_path_parameters_get_no_server_error(framing_server: Server) -> None:
    rng = random.Random(SEED)
    with framing_server.client(timeout=60) as client:
        # a stored version, so that hostile version references reach the registry's lookup
        _push(client, "fuzzed")
        spec = client.get("/openapi.json").json()
        targets = multipart_paths(spec)
        requests = path_requests(spec, rng)
        requests += [multipart_request(rng, rng.choice(targets)) for _ in range(MULTIPART_REQUESTS)]
        defects: list[str] = []
        codes: Counter[str] = Counter()
        for request in requests:
            answer = _send(client, request)
            code, wrong = judge(answer)
            if answer.status_code in REDIRECTS:
                code, wrong = "redirect", None
            codes[code] += 1
            if wrong is not None:
                defects.append(f"{wrong}: {request.describe()}: {answer.text[:300]}")
        assert defects == [], "\n".join(defects[:20])
        assert client.get("/healthz").status_code == 200
    # the framing reached the multipart parser's every refusal, and the parameters the registry's
    assert len(targets) >= 8, targets
    for code in ("bad-multipart", "too-many-parts", "version-not-found", "model-not-found"):
        assert codes[code] > 0, dict(codes)
    assert upload_leftovers(framing_server) == []


def _range_wrong(answer: httpx.Response, whole: bytes) -> str | None:
    """Why a ranged answer is not one RFC 9110 allows: the whole body (200), the bytes one
    Content-Range names or a multipart/byteranges of such parts (206), or 416 naming the size."""
    size = len(whole)
    if answer.status_code == 200:
        return None if answer.content == whole else "200 without the whole body"
    if answer.status_code == 416:
        want = f"bytes */{size}"
        return None if answer.headers.get("content-range") == want else "416 without */size"
    if answer.status_code != 206:
        return None
    media = answer.headers.get("content-type", "")
    if media.startswith("multipart/byteranges"):
        parts = re.findall(rb"Content-Range: bytes (\d+)-(\d+)/(\d+)\r\n\r\n", answer.content)
        bad = [p for p in parts if not int(p[0]) <= int(p[1]) < int(p[2]) == size]
        return None if parts and not bad else f"byteranges parts {parts[:3]}"
    found = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", answer.headers.get("content-range", ""))
    if found is None:
        return "206 without a Content-Range"
    first, last, total = (int(g) for g in found.groups())
    if total != size or answer.content != whole[first : last + 1]:
        return f"206 {found.group(0)} with other bytes"
    return None


def test_odd_ranges_are_answered_as_rfc_9110_allows(framing_server: Server) -> None:
    rng = random.Random(SEED)
    with framing_server.client(timeout=60) as client:
        _push(client, "ranged")
        archive = client.get("/v1/models/ranged/versions/1/archive")
        plain = {"name": "ranged", "ref": "1", "digest": archive.headers["etag"].strip('"')}
        requests = range_requests(client.get("/openapi.json").json(), plain, rng)
        wholes: dict[str, bytes] = {}
        defects: list[str] = []
        statuses: Counter[int] = Counter()
        for request in requests:
            if request.path not in wholes:
                wholes[request.path] = client.get(request.path).content
            answer = _send(client, request)
            statuses[answer.status_code] += 1
            wrong = judge(answer)[1] or _range_wrong(answer, wholes[request.path])
            if wrong is not None:
                defects.append(f"{wrong}: {request.describe()}")
        assert defects == [], "\n".join(defects[:20])
    # every route that serves ranges was reached, and every kind of answer came up
    assert len(wholes) == 3, sorted(wholes)
    assert {200, 206, 416} <= set(statuses), statuses
