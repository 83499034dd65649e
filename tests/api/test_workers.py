"""`pt2serde serve` with several HTTP processes: each answers, the same as the library."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app import operations as ops
from app.settings import Settings
from tests.api.conftest import SERVER_ENV, Server, start_server, stop_server
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes

ZIP = {"Content-Type": "application/zip"}


@pytest.fixture(scope="module")
def two_processes() -> Iterator[Server]:
    running = start_server({**SERVER_ENV, "PT2SERDE_HTTP_WORKERS": "2"})
    try:
        yield running
    finally:
        stop_server(running)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found.extend(int(child) for child in task.read_text().split())
    return found


def _serving(pid: int) -> list[int]:
    """The uvicorn worker processes under the server (multiprocessing spawns them)."""
    return [
        child
        for child in _children(pid)
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
    ]


def test_two_processes_answer_like_the_library(
    two_processes: Server, zoo: dict[str, ZooProgram]
) -> None:
    assert len(_serving(two_processes.process.pid)) == 2
    archives = [archive_bytes(zoo[name].ep) for name in PROGRAM_NAMES[:4]] * 3
    settings = Settings()

    def library(data: bytes) -> object:
        with ops.open_source(data, "zip", settings) as source:
            return ops.check(source, "semantic", settings).model_dump(mode="json")

    def served(data: bytes) -> object:
        with two_processes.client() as client:
            answer = client.post(
                "/v1/validate", params={"level": "semantic"}, content=data, headers=ZIP
            )
        assert answer.status_code == 200, answer.text
        return answer.json()

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(served, archives))
    assert answers == [library(data) for data in archives]
    # a torch-level request starts the torch pool of whichever process takes it
    assert _served_torch(two_processes, archives[0])["valid"]


def _served_torch(server: Server, data: bytes) -> dict[str, object]:
    with server.client() as client:
        answer = client.post("/v1/validate", params={"level": "torch"}, content=data, headers=ZIP)
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body
