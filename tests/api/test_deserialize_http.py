"""POST /v1/deserialize of a .pt2 as a plain body through a real server whose every body is
spliced into its file (direct_body_bytes=1) and whose answer goes out by sendfile: the answer is
the very archive our writer makes of the program torch built, and a corrupt upload is refused
with a problem before any of it is sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.jobs import documents
from app.jobs import torch as jobs
from app.settings import Settings
from tests.api.conftest import Server, start_server, stop_server, upload_leftovers
from tests.bridge.test_torch_path import _corrupt
from tests.zoo import ZooProgram, archive_bytes

ZIP = {"Content-Type": "application/zip"}
NAMES = ("conv", "linear_bn_train")


@pytest.fixture(scope="module")
def spliced_server() -> Iterator[Server]:
    env = {"PT2SERDE_HTTP_WORKERS": "1", "PT2SERDE_WORKERS": "1", "PT2SERDE_DIRECT_BODY_BYTES": "1"}
    running = start_server(env)
    yield running  # pytest runs the rest at teardown, whatever the tests did
    stop_server(running)


def _written(archive: Path, folder: Path) -> bytes:
    """What our writer makes of the archive's program, as the CLI's deserialize writes it."""
    checked, target = folder / "document.json", folder / "written.pt2"
    upload = documents.UploadedProgram(archive, "zip")
    built = documents.job_buildable(upload, Settings(), None, None, checked)
    jobs.job_deserialize_to_pt2(checked, built.tensors, target)
    return target.read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_the_answer_is_our_writers_archive(
    name: str, spliced_server: Server, zoo: dict[str, ZooProgram], tmp_path: Path
) -> None:
    archive = tmp_path / "upload.pt2"
    archive.write_bytes(archive_bytes(zoo[name].ep))
    with spliced_server.client() as client:
        answer = client.post("/v1/deserialize", content=archive.read_bytes(), headers=ZIP)
    assert answer.status_code == 200, answer.text
    assert answer.headers["connection"] == "close"  # the parser never saw the spliced body
    assert answer.content == _written(archive, tmp_path)
    assert upload_leftovers(spliced_server) == []


def test_a_corrupt_tensor_is_a_problem_and_nothing_is_sent(
    spliced_server: Server, zoo: dict[str, ZooProgram], tmp_path: Path
) -> None:
    archive = tmp_path / "upload.pt2"
    archive.write_bytes(archive_bytes(zoo["linear_bn_train"].ep))
    _corrupt(archive)
    with spliced_server.client() as client:
        answer = client.post("/v1/deserialize", content=archive.read_bytes(), headers=ZIP)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == "archive-crc-mismatch"
    assert upload_leftovers(spliced_server) == []


def test_kept_alive_clients_are_served_after_a_spliced_body(spliced_server: Server) -> None:
    with httpx.Client(base_url=spliced_server.url, timeout=60) as client:
        for _ in range(3):
            refused = client.post("/v1/deserialize", content=b"not a zip", headers=ZIP)
            assert refused.status_code >= 400
            assert refused.headers["content-type"] == "application/problem+json"
