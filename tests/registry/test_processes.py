"""Two service processes on one backend: concurrent pushers to one model, then SIGKILLs at timed
delays into the processing of a large upload."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch

from tests.registry.conftest import (
    BACKENDS,
    Backend,
    RegistryServer,
    assert_served,
    check_consistent,
    kill_server,
    make_backend,
    start_registry_server,
    start_replicas,
    stop_registry_server,
    variant,
)
from tests.zoo import archive_bytes

PUSHERS = 8
PUSHES_EACH = 2
ZIP = {"Content-Type": "application/zip"}
#: when to kill, as fractions of how long processing the large upload took once
FRACTIONS = (0.5, 0.9)


@pytest.fixture(scope="module", params=BACKENDS)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Backend, list[RegistryServer]]]:
    """Two warm service processes sharing one backend (one data directory, one database)."""
    backend = make_backend(request, tmp_path_factory.mktemp("pair"))
    servers = start_replicas(backend, 2)
    try:
        yield backend, servers
    finally:
        for server in servers:
            stop_registry_server(server)


def test_concurrent_pushers_get_versions_one_to_n(
    pair: tuple[Backend, list[RegistryServer]], archives: dict[str, bytes]
) -> None:
    backend, servers = pair
    programs = [variant(archives["conv"], i + 1) for i in range(PUSHERS * PUSHES_EACH)]

    def pusher(index: int) -> list[httpx.Response]:
        with servers[index % 2].client() as client:
            return [
                client.post("/v1/models/busy/versions", content=programs[index * PUSHES_EACH + k])
                for k in range(PUSHES_EACH)
            ]

    with ThreadPoolExecutor(PUSHERS) as pool:
        # map keeps order: responses[i] answered the push of programs[i]
        responses = [r for batch in pool.map(pusher, range(PUSHERS)) for r in batch]
    assert [r.status_code for r in responses] == [201] * len(programs), [r.text for r in responses]
    numbers = [r.json()["version"] for r in responses]
    assert sorted(numbers) == list(range(1, len(programs) + 1))
    with servers[1].client() as client:
        for number, program in zip(numbers, programs, strict=True):
            fetched = client.get(f"/v1/models/busy/versions/{number}/archive")
            assert_served(fetched.content, program)
    assert check_consistent(backend)["busy"] == list(range(1, len(programs) + 1))


@pytest.fixture(scope="module")
def large_archive() -> bytes:
    """A .pt2 with 32 MiB of weights: processing it takes long enough for a kill to land in."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU())
    return archive_bytes(torch.export.export(model, (torch.randn(2, 2048),)))


def _push_and_kill(server: RegistryServer, data: bytes, delay: float) -> None:
    """Send the whole upload, wait `delay` seconds, SIGKILL the server process."""
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        "POST /v1/models/large/versions HTTP/1.1\r\nHost: registry\r\n"
        f"Content-Type: application/zip\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head + data)
        time.sleep(delay)
        kill_server(server)


def test_killed_while_processing_a_large_upload(
    pair: tuple[Backend, list[RegistryServer]], large_archive: bytes
) -> None:
    """One push measures how long processing takes; then each server in turn is killed that
    far into processing another upload; every time the registry holds whole versions only."""
    backend, servers = pair
    with servers[0].client() as client:
        started = time.monotonic()
        first = client.post("/v1/models/large/versions", content=large_archive, headers=ZIP)
        took = time.monotonic() - started
    assert first.status_code == 201, first.text
    live = [1]
    for index, (server, fraction) in enumerate(zip(servers, FRACTIONS, strict=True), start=2):
        _push_and_kill(server, variant(large_archive, index), took * fraction)
        # the next number is handed out only if the killed push committed
        seen = check_consistent(backend).get("large")
        assert seen in (live, [*live, live[-1] + 1]), seen
        assert seen is not None
        live = seen
    restarted = start_registry_server(backend)
    try:
        with restarted.client() as client:
            listed = client.get("/v1/models/large/versions").json()["versions"]
        assert [v["version"] for v in listed] == live
    finally:
        stop_registry_server(restarted)
    assert check_consistent(backend)["large"] == live
