"""A registry push reads its archive in a document worker: vetting, the canonical form, the
served archive and the graph answer are built there, with what the registry's `ingest.vet` and
the graph view build in process; the API process runs none of it."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import operations as ops
from app.api.graphs import graph_answer
from app.jobs import graph, push
from app.main import create_app
from app.programs.inspect.graph_view import program_graph
from app.registry import ingest
from app.registry.answers import answer_path
from app.registry.blobs.staging import Staged
from app.settings import Settings
from tests.registry.conftest import rewrite_member
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes

ZIP = {"Content-Type": "application/zip"}


def _refuse_here(*_: object) -> None:
    raise AssertionError("a push's document work ran in the API process")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("push")


@pytest.fixture(scope="module")
def settings(folder: Path) -> Settings:
    # every upload goes to a document worker
    return Settings(
        data_dir=folder / "data", document_inline_bytes=0, document_workers=1, workers=1
    )


@pytest.fixture(scope="module")
def client(settings: Settings, folder: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as opened, pytest.MonkeyPatch.context() as patch:
        # the (spawned) workers import their own, unpatched, copies
        patch.setattr(push, "vet", _refuse_here)
        patch.setattr(graph, "program_graph", _refuse_here)
        patch.setattr(tempfile, "tempdir", str(folder))
        yield opened


@pytest.fixture(scope="module")
def archive(zoo: dict[str, ZooProgram]) -> bytes:
    return archive_bytes(zoo[PROGRAM_NAMES[0]].ep)


def test_a_push_is_vetted_in_a_document_worker_as_in_process(
    client: TestClient, settings: Settings, archive: bytes, folder: Path, tmp_path: Path
) -> None:
    answer = client.post("/v1/models/m/versions", content=archive, headers=ZIP)
    assert answer.status_code == 201, answer.text
    pushed = answer.json()
    # what vetting makes of the same upload in this process (ingest's own `vet`: not patched)
    upload = tmp_path / "upload.pt2"
    upload.write_bytes(archive)
    served = Staged(tmp_path / "served.pt2")
    with ops.open_source(upload, "zip", settings) as source:
        vetted, _ = ingest.vet(source, settings, None, served)
    served.finish()
    digests = vetted.digests
    assert pushed["digests"] == {
        "graph": digests.graph,
        "weights": digests.weights,
        "program": digests.program,
        "archive": served.digest,
    }
    assert pushed["summary"] == vetted.summary.model_dump(mode="json")
    assert pushed["min_schema_version"] == vetted.min_schema_version
    served_bytes = client.get("/v1/models/m/versions/1/archive").content
    assert served_bytes == served.path.read_bytes()
    # the graph answer was built after the push, in the worker, from the checked document
    answer_file = answer_path(settings, graph_answer(served.digest))
    assert answer_file.exists()
    with ops.open_source(upload, "zip", settings) as source:
        model = source.model(None)
        document = ops.read_document(source, model, settings)
    assert answer_file.read_bytes() == program_graph(document.doc).model_dump_json().encode()
    assert client.get("/v1/models/m/versions/1/graph").content == answer_file.read_bytes()
    # the push's files are gone with it
    assert not list(folder.glob("pt2serde-push-*"))


def test_a_push_the_worker_finds_invalid_is_refused_with_its_errors(
    client: TestClient, archive: bytes, folder: Path
) -> None:
    invalid = rewrite_member(
        archive, "models/model.json", lambda b: b.replace(b".default", b".nope", 1)
    )
    answer = client.post("/v1/models/refused/versions", content=invalid, headers=ZIP)
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["code"] == "invalid-program"
    assert {e["code"] for e in body["errors"]} == {"operator-unknown"}
    assert client.get("/v1/models/refused/versions").status_code == 404
    assert not list(folder.glob("pt2serde-push-*"))
