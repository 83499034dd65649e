"""Graph answers are built in a document worker, never in the API process, however small the
program: `POST /v1/graph` and a stored version viewed before its answer exists, with the answer
the library builds and failures as problems."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import schema
from app.main import create_app
from app.programs.inspect.graph_view import program_graph
from app.registry import Registry
from app.settings import Settings
from app.workers import graphs
from bench.zoo import ZooProgram, archive_bytes, torch_json
from tests.registry.conftest import InProcessTorch

ZIP = {"Content-Type": "application/zip"}
JSON = {"Content-Type": "application/json"}


def _refuse_here(*_: object) -> None:
    raise AssertionError("a graph answer was built in the API process")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("graphs")


@pytest.fixture(scope="module")
def settings(folder: Path) -> Settings:
    # the default document_inline_bytes: the programs below are small enough to be read here
    return Settings(data_dir=folder / "data", document_workers=1, workers=1)


@pytest.fixture(scope="module")
def client(settings: Settings, folder: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as opened, pytest.MonkeyPatch.context() as patch:
        # the (spawned) workers import their own, unpatched, copies
        patch.setattr(graphs, "program_graph", _refuse_here)
        patch.setattr(tempfile, "tempdir", str(folder))
        yield opened


def _expected(document: bytes) -> bytes:
    """What the library makes of a document (graph_view's own function: not patched)."""
    return program_graph(schema.upgrade(document).document).model_dump_json().encode()


def _registry(client: TestClient) -> Registry:
    app = client.app
    assert isinstance(app, FastAPI)
    registry: Registry = app.state.registry
    return registry


def test_an_uploads_graph_is_built_in_a_worker(
    client: TestClient, settings: Settings, zoo: dict[str, ZooProgram]
) -> None:
    ep = zoo["conv"].ep
    document, archive = torch_json(ep), archive_bytes(ep)
    assert len(document) <= len(archive) <= settings.document_inline_bytes
    for body, headers in ((document, JSON), (archive, ZIP)):
        answer = client.post("/v1/graph", content=body, headers=headers)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/json"
        assert answer.content == _expected(document)


def test_a_stored_versions_graph_is_built_in_a_worker_when_first_viewed(
    client: TestClient, settings: Settings, folder: Path, zoo: dict[str, ZooProgram]
) -> None:
    registry = _registry(client)
    staged = registry.blobs.stage_bytes(archive_bytes(zoo["cond"].ep))
    try:
        candidate = registry.prepare(staged.path, InProcessTorch())
    finally:
        staged.discard()
    # pushed without the route: no answer was built after the push
    info = registry.push("cond", candidate).version
    kept = settings.data_dir / "graphs" / f"{info.digests.archive}.json"
    assert not kept.exists()
    answer = client.get("/v1/models/cond/versions/1/graph")
    assert answer.status_code == 200, answer.text
    with registry.source("cond", "1") as (_, source):
        document = source.documents[info.archive_model]
    assert answer.content == _expected(document) == kept.read_bytes()
    assert answer.headers["etag"] == f'"graph-{info.digests.archive}"'
    # the stored document handed to the worker is gone with its folder
    assert not list(folder.glob("pt2serde-graph-*"))


def _problem(answer: Any, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = answer.json()
    assert body["code"] == code, body
    return body


def test_a_workers_failure_is_a_problem(client: TestClient, zoo: dict[str, ZooProgram]) -> None:
    doc = orjson.loads(torch_json(zoo["conv"].ep))
    doc["graph_module"]["graph"]["nodes"][2]["metadata"]["nn_module_stack"] = "L__self__,,M;x"
    answer = client.post("/v1/graph", content=orjson.dumps(doc), headers=JSON)
    body = _problem(answer, 422, "bad-module-stack")
    assert [(e["code"], e["path"]) for e in body["errors"]] == [
        ("bad-module-stack", "/graph_module/graph/nodes/2/metadata/nn_module_stack")
    ]
    _problem(
        client.post("/v1/graph", content=b'{"graph_module": ', headers=JSON),
        422,
        "invalid-document",
    )
