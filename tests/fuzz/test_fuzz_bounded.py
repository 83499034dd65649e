"""A bounded fuzzing campaign in the suite: a few thousand mutants of the zoo's archives and
documents through every program endpoint of a live server; 0 5xx, 0 hangs, every problem code
catalogued with the status it was answered with, no marker file, and the server still healthy.
`make fuzz` runs the long campaign.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import SERVER_ENV, Server, start_server, stop_server, upload_leftovers
from tests.fuzz.campaign import judge, run_campaign
from tests.fuzz.mutants import Corpus, build_corpus, make_mutant
from tests.zoo import ZooProgram

SEED = 20261122
MUTANTS = 3000
#: The campaign stops here if the machine is slow; MIN_SENT must still have been sent.
MINUTES = 2.5
MIN_SENT = 1500
ENDPOINTS = (
    "/v1/serialize",
    "/v1/validate?level=schema",
    "/v1/validate?level=semantic",
    "/v1/validate?level=torch",
    "/v1/canonicalize",
    "/v1/deserialize",
    "/v1/diff",
    "/v1/compat",
)


@pytest.fixture(scope="module")
def corpus(zoo: dict[str, ZooProgram]) -> Corpus:
    """The zoo's archives, documents and weights."""
    return build_corpus(zoo)


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[Server]:
    """A server of its own (the same settings as the API tests'): mutants may crash workers."""
    running = start_server(SERVER_ENV)
    try:
        yield running
    finally:
        stop_server(running)


def test_mutants_are_reproducible(corpus: Corpus, tmp_path: Path) -> None:
    for index in range(0, 400, 7):
        first = make_mutant(corpus, SEED, index, tmp_path)
        again = make_mutant(corpus, SEED, index, tmp_path)
        assert first == again
    payloads = {make_mutant(corpus, SEED, i, tmp_path).payload for i in range(100)}
    assert len(payloads) > 90


def test_bounded_campaign(corpus: Corpus, fuzz_server: Server, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    summary = run_campaign(
        fuzz_server.url,
        corpus,
        seed=SEED,
        mutants=MUTANTS,
        marker_dir=markers,
        minutes=MINUTES,
        threads=3,
    )
    report = summary.render()
    assert summary.defects == [], report
    assert summary.markers == [], report
    assert summary.sent >= MIN_SENT, report
    assert fuzz_server.process.poll() is None, report
    with fuzz_server.client(timeout=60) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
    assert upload_leftovers(fuzz_server) == []
    # the mutants reached every endpoint and every layer: zip, layout, schema, screen, torch
    assert set(ENDPOINTS) <= set(summary.endpoints), report
    assert any(e.startswith("/v1/inspect") for e in summary.endpoints), report
    classes = summary.by_class()
    assert classes.get("2xx", 0) > summary.sent // 10, report
    assert classes.get("4xx", 0) > summary.sent // 3, report
    assert len(summary.codes) >= 35, report
    for family in ("archive-", "unsafe-", "invalid-document", "torch-"):
        assert any(code.startswith(family) for code in summary.codes), (family, report)


def test_the_judge_refuses_what_the_campaign_must_not_accept() -> None:
    def answer(status: int, body: bytes, media: str = "application/problem+json") -> httpx.Response:
        return httpx.Response(status, content=body, headers={"Content-Type": media})

    ok = b'{"code": "archive-truncated", "status": 422}'
    assert judge(answer(422, ok)) == ("archive-truncated", None)
    assert judge(answer(200, b"{}", "application/json")) == ("", None)
    assert judge(answer(500, b'{"code": "internal-error", "status": 500}'))[1] is not None
    assert judge(answer(503, b'{"code": "worker-crashed", "status": 503}'))[1] is not None
    assert judge(answer(413, ok))[1] is not None  # catalogued as 422
    assert judge(answer(422, b'{"code": "no-such-code", "status": 422}'))[1] is not None
    assert judge(answer(422, ok, "application/json"))[1] is not None
    assert judge(answer(404, b"Not Found", "text/plain"))[1] is not None
    assert judge(answer(302, b""))[1] is not None
