"""Views of stored versions through a real server: the validation, inspection, ranges and diff
of a version whose document is over the inline size are computed in a document worker under the
admission budget, not parsed in the HTTP process, and held by digest: six readers at once cost
the HTTP process no more than its budget, and all get the library's answer."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest
import torch

from app import operations as ops
from app.settings import Settings
from tests.registry.conftest import (
    RegistryServer,
    make_backend,
    start_registry_server,
    stop_registry_server,
    warm,
)

MiB = 1024 * 1024
#: what a read may add to the HTTP process's resident set (docs/security.md's budget)
BUDGET = 64 * MiB
STEPS = 1500


class _Chain(torch.nn.Module):
    """Thousands of nodes and a dynamic batch: a document of several MiB, weights of bytes."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((4,), scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """A long chain of small steps."""
        for _ in range(STEPS):
            x = x * self.scale + 0.5
        return x


def _archive(scale: float) -> bytes:
    batch = torch.export.Dim("batch", min=2, max=64)
    program = torch.export.export(_Chain(scale), (torch.ones(3, 4),), dynamic_shapes=({0: batch},))
    out = io.BytesIO()
    torch.export.save(program, out)
    return out.getvalue()


@pytest.fixture(scope="module")
def archives() -> list[bytes]:
    return [_archive(1.0), _archive(0.5)]


@pytest.fixture(scope="module")
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, archives: list[bytes]
) -> Iterator[RegistryServer]:
    backend = make_backend(request, tmp_path_factory.mktemp("views"), "sqlite")
    server = start_registry_server(backend, {"PT2SERDE_HTTP_WORKERS": "1"})
    try:
        warm(server)
        with server.client() as client:
            for archive in archives:
                pushed = client.post(
                    "/v1/models/chain/versions",
                    content=archive,
                    headers={"Content-Type": "application/zip"},
                )
                assert pushed.status_code == 201, pushed.text
        yield server
    finally:
        stop_registry_server(server)


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _six_at_once(served: RegistryServer, path: str) -> tuple[list[httpx.Response], int]:
    """Six parallel GETs of `path`, and the HTTP process's resident growth meanwhile."""
    pid = served.process.pid
    base = _rss(pid)
    peak = base
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss(pid))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    get: Callable[[int], httpx.Response]
    with served.client() as client, ThreadPoolExecutor(6) as pool:

        def get(_: int) -> httpx.Response:
            return client.get(path)

        answers = list(pool.map(get, range(6)))
    done.set()
    sampler.join()
    return answers, peak - base


@pytest.mark.parametrize(
    ("path", "library"),
    [
        ("validate?level=semantic", lambda s: ops.check(s, "semantic", Settings())),
        ("ranges", None),
        ("inspect?view=modules", None),
        ("diff?against=1", None),
    ],
)
def test_six_readers_of_a_large_stored_version_stay_within_budget(
    served: RegistryServer,
    archives: list[bytes],
    path: str,
    library: Callable[[ops.Source], object] | None,
) -> None:
    answers, growth = _six_at_once(served, f"/v1/models/chain/versions/2/{path}")
    assert all(a.status_code == 200 for a in answers), answers[0].text[:300]
    assert len({a.content for a in answers}) == 1
    assert growth < BUDGET, f"{growth / MiB:.1f} MiB"
    if library is not None:
        with ops.open_source(archives[1], "zip", Settings()) as source:
            expected = library(source)
        assert orjson.loads(answers[0].content) == orjson.loads(
            orjson.dumps(expected, default=lambda m: m.model_dump(mode="json"))
        )
