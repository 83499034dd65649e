"""Framing fuzz in the suite: seeded multipart bodies with odd boundaries, part counts and part
headers on every multipart route, and hostile values in every path parameter of the API; every
answer is a 2xx or a catalogued problem with its status, and the server stays healthy."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import torch

from tests.api.conftest import SERVER_ENV, Server, start_server, stop_server, upload_leftovers
from tests.fuzz.campaign import judge
from tests.fuzz.framing import RawRequest, multipart_paths, multipart_request, path_requests
from tests.programs import archive_bytes

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


def test_framing_and_path_parameters_get_no_server_error(framing_server: Server) -> None:
    rng = random.Random(SEED)
    with framing_server.client(timeout=60) as client:
        # a stored version, so that hostile version references reach the registry's lookup
        program = torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
        pushed = client.post(
            "/v1/models/fuzzed/versions",
            content=archive_bytes(program),
            headers={"Content-Type": "application/zip"},
        )
        assert pushed.status_code == 201, pushed.text
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
