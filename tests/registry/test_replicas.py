"""Three service processes on one PostgreSQL and one S3 store behave as one registry: eight
concurrent pushers spread over them, one replica SIGKILLed mid-push, the pushers it served
retrying elsewhere; versions stay consecutive, none lost or doubled, and after gc the store
holds exactly the objects of the versions."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.registry.conftest import (
    Backend,
    RegistryServer,
    check_consistent,
    kill_server,
    make_backend,
    start_replicas,
    stop_registry_server,
    variant,
)

REPLICAS = 3
PUSHERS = 8
PUSHES_EACH = 2
#: pushes answered before the replica is killed (the others are in flight or still to come)
KILL_AFTER = 4
ZIP = {"Content-Type": "application/zip"}


@pytest.fixture(params=["postgresql-s3"])
def replicas(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Backend, list[RegistryServer]]]:
    """Three warm service processes sharing one database and one bucket prefix."""
    backend = make_backend(request, tmp_path_factory.mktemp("replicas"))
    servers = start_replicas(backend, REPLICAS)
    try:
        yield backend, servers
    finally:
        for server in servers:
            stop_registry_server(server)


def test_a_replica_killed_mid_push_loses_and_doubles_nothing(
    replicas: tuple[Backend, list[RegistryServer]], archives: dict[str, bytes]
) -> None:
    backend, servers = replicas
    programs = [variant(archives["conv"], i + 1) for i in range(PUSHERS * PUSHES_EACH)]
    answered = threading.Semaphore(0)
    dead: set[int] = set()

    def push(index: int, program: bytes) -> int:
        """Push through this pusher's replica, then the next live one while it fails."""
        for attempt in range(REPLICAS):
            replica = (index + attempt) % REPLICAS
            if replica in dead:
                continue
            try:
                with servers[replica].client() as client:
                    answer = client.post("/v1/models/fleet/versions", content=program, headers=ZIP)
            except httpx.HTTPError:
                continue
            assert answer.status_code in (200, 201), answer.text
            answered.release()
            return int(answer.json()["version"])
        raise AssertionError("no replica took the push")

    def pusher(index: int) -> list[int]:
        return [push(index, programs[index * PUSHES_EACH + k]) for k in range(PUSHES_EACH)]

    with ThreadPoolExecutor(PUSHERS) as pool:
        batches = [pool.submit(pusher, i) for i in range(PUSHERS)]
        for _ in range(KILL_AFTER):
            answered.acquire(timeout=300)
        dead.add(REPLICAS - 1)
        kill_server(servers[-1])
        numbers = [n for batch in batches for n in batch.result()]
    # each program is one version; a push the kill cut off either committed (its retry got
    # the same version back) or did not (its retry made it): no gap, no double
    assert sorted(set(numbers)) == list(range(1, len(programs) + 1)), numbers
    assert len(numbers) == len(programs)
    assert check_consistent(backend)["fleet"] == list(range(1, len(programs) + 1))
