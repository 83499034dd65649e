"""Graph answers are built in a document worker, never in the API process, however small the
program: `POST /v1/graph` and a stored version viewed before its answer exists, with the answer
the library builds and failures as problems."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any
from unittest.mock import Mock

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import schema
from app.api.graphs import graph_answer
from app.jobs import graph
from app.main import create_app
from app.programs.inspect.graph_view import program_graph
from app.registry.answers import FORMAT, answer_path
from app.registry.store import Registry
from app.settings import Settings
from tests.registry.test_store import push
from tests.zoo import ZooProgram, archive_bytes, torch_json

ZIP = {"Content-Type": "application/zip"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    # the default document_inline_bytes: the programs below are small enough to be read here
    data = tmp_path_factory.mktemp("graphs") / "data"
    return Settings(data_dir=data, document_workers=1, workers=1)


@pytest.fixture(scope="module")
def built_here() -> Iterator[Mock]:
    """graph_view's function as this process's graph jobs see it, counting its calls (the
    spawned workers import their own copies)."""
    with pytest.MonkeyPatch.context() as patch:
        counted = Mock(wraps=program_graph)
        patch.setattr(graph, "program_graph", counted)
        yield counted


@pytest.fixture(scope="module")
def app(settings: Settings) -> FastAPI:
    return create_app(settings)


@pytest.fixture(scope="module")
def client(app: FastAPI, settings: Settings, built_here: Mock) -> Iterator[TestClient]:
    with TestClient(app) as opened, pytest.MonkeyPatch.context() as patch:
        # where the stored documents handed to workers go
        patch.setattr(tempfile, "tempdir", str(settings.data_dir.parent))
        yield opened


def _expected(document: bytes) -> bytes:
    """What the library makes of a document (graph_view's own function: not patched)."""
    return program_graph(schema.upgrade(document).document).model_dump_json().encode()


def test_an_uploads_graph_is_built_in_a_worker(
    client: TestClient, settings: Settings, built_here: Mock, zoo: dict[str, ZooProgram]
) -> None:
    ep = zoo["conv"].ep
    document, archive = torch_json(ep), archive_bytes(ep)
    assert len(document) <= len(archive) <= settings.document_inline_bytes
    for body, headers in ((document, JSON), (archive, ZIP)):
        answer = client.post("/v1/graph", content=body, headers=headers)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/json"
        assert answer.content == _expected(document)
    assert not built_here.called


def test_a_stored_versions_graph_is_built_in_a_worker_when_first_viewed(
    app: FastAPI,
    client: TestClient,
    settings: Settings,
    built_here: Mock,
    zoo: dict[str, ZooProgram],
) -> None:
    registry: Registry = app.state.registry
    # pushed without the route: no answer was built after the push
    info = push(registry, "cond", archive_bytes(zoo["cond"].ep)).version
    kept = answer_path(settings, graph_answer(info.digests.archive))
    assert not kept.exists()
    answer = client.get("/v1/models/cond/versions/1/graph")
    assert answer.status_code == 200, answer.text
    with registry.source("cond", "1") as (_, source):
        document = source.documents[info.archive_model]
    assert answer.content == _expected(document) == kept.read_bytes()
    assert answer.headers["etag"] == f'"{info.digests.archive}.graph.f{FORMAT}"'
    # the stored document handed to the worker is gone with its folder
    assert not list(settings.data_dir.parent.glob("pt2serde-graph-*"))
    assert not built_here.called


def _problem(answer: Any, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = answer.json()
    assert body["code"] == code, body
    return body


def test_a_workers_failure_is_a_problem(
    client: TestClient, built_here: Mock, zoo: dict[str, ZooProgram]
) -> None:
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
    assert not built_here.called
