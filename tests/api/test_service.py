"""The service through a real uvicorn server: every endpoint on zoo programs."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator

import httpx
import orjson
import pytest
import torch

import schema
from app import operations as ops
from app.settings import Settings
from tests.api.conftest import Server, upload_leftovers
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes, outputs_close, torch_json

ZIP = {"Content-Type": "application/zip"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def archives(zoo: dict[str, ZooProgram]) -> dict[str, bytes]:
    return {name: archive_bytes(zoo[name].ep) for name in PROGRAM_NAMES}


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def test_schema_endpoints(client: httpx.Client) -> None:
    current = client.get("/v1/schema").json()
    assert current["version"] == "8.20"
    assert "2.13.0" in current["torch_releases"]
    assert current["torch_installed"].startswith("2.13")
    versions = client.get("/v1/schema/versions").json()
    assert [v["version"] for v in versions] == [v.label for v in schema.versions()]
    assert client.get("/v1/schema/versions/8.7").json() == schema.json_schema("8.7")
    described = client.get("/v1/schema/versions/8.14", params={"format": "description"})
    assert described.json() == schema.describe("8.14")


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_serialize_deserialize_round_trip(
    name: str,
    client: httpx.Client,
    archives: dict[str, bytes],
    zoo: dict[str, ZooProgram],
    tmp_path: object,
) -> None:
    program = zoo[name]
    plain = client.post("/v1/serialize", content=archives[name], headers=ZIP)
    assert plain.status_code == 200, plain.text
    body = plain.json()
    assert body["documents"]["model"] == orjson.loads(torch_json(program.ep))
    stored = {*program.ep.state_dict, *program.ep.constants}
    assert {w["name"] for w in body["weights"]} == stored
    bundle = client.post(
        "/v1/serialize", params={"weights": "safetensors"}, files={"file": archives[name]}
    )
    assert bundle.status_code == 200, bundle.text
    with zipfile.ZipFile(io.BytesIO(bundle.content)) as zf:
        document = zf.read("documents/model.json")
        weights = zf.read("weights.safetensors")
    rebuilt = client.post("/v1/deserialize", files={"document": document, "weights": weights})
    assert rebuilt.status_code == 200, rebuilt.text
    assert rebuilt.headers["content-type"] == "application/zip"
    # the archive was written by our own server from programs this test exported
    loaded = torch.export.load(io.BytesIO(rebuilt.content))
    assert outputs_close(loaded.module()(*program.args, **program.kwargs), program.run())


@pytest.mark.parametrize("name", ["linear_bn_train", "dynamic", "cond", "pytree"])
def test_canonicalize_equals_library(
    name: str, client: httpx.Client, archives: dict[str, bytes]
) -> None:
    answer = client.post("/v1/canonicalize", content=archives[name], headers=ZIP)
    assert answer.status_code == 200, answer.text
    settings = Settings()
    with ops.open_source(archives[name], "zip", settings) as source:
        expected = ops.canonical(source, settings)
    assert answer.content == expected.data
    assert answer.headers["x-graph-digest"] == expected.digests.graph
    assert answer.headers["x-weights-digest"] == expected.digests.weights
    assert answer.headers["x-program-digest"] == expected.digests.program
    document = client.post("/v1/canonicalize", content=torch_json_of(archives[name]), headers=JSON)
    assert document.headers["x-graph-digest"] == expected.digests.graph
    # a document holds no weights: no weights or program digest, the ETag is its graph's
    assert "x-weights-digest" not in document.headers
    assert "x-program-digest" not in document.headers
    assert document.headers["etag"] == f'"{expected.digests.graph}"'


def torch_json_of(archive: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith("models/model.json")))


@pytest.mark.parametrize("level", ["schema", "semantic", "torch"])
def test_validate_clean_programs(
    level: str, client: httpx.Client, archives: dict[str, bytes]
) -> None:
    for name, data in archives.items():
        report = client.post("/v1/validate", params={"level": level}, content=data, headers=ZIP)
        assert report.status_code == 200, (name, report.text)
        body = report.json()
        assert body["valid"], (name, body["findings"])
        assert body["level"] == level
        if level == "torch":
            assert body["unchecked"] == [], name


def _mutated(archive: bytes, mutate: object) -> bytes:
    doc = orjson.loads(torch_json_of(archive))
    mutate(doc)  # type: ignore[operator]
    return orjson.dumps(doc)


def _drop_first_node(doc: dict[str, object]) -> None:
    graph = doc["graph_module"]["graph"]  # type: ignore[index]
    graph["nodes"].pop(0)  # type: ignore[index]


def _bad_target(doc: dict[str, object]) -> None:
    graph = doc["graph_module"]["graph"]  # type: ignore[index]
    graph["nodes"][0]["target"] = "torch.ops.aten.no_such_op.default"  # type: ignore[index]


def _dtype_999(doc: dict[str, object]) -> None:
    graph = doc["graph_module"]["graph"]  # type: ignore[index]
    next(iter(graph["tensor_values"].values()))["dtype"] = 999  # type: ignore[index]


@pytest.mark.parametrize(
    ("mutate", "level", "code"),
    [
        (_dtype_999, "schema", "unknown-enum-value"),
        (_drop_first_node, "semantic", "name-undefined"),
        # the operator registry finds it without torch; the torch level stops there
        (_bad_target, "semantic", "operator-unknown"),
        (_bad_target, "torch", "operator-unknown"),
    ],
)
def test_validate_reports_broken_programs(
    mutate: object, level: str, code: str, client: httpx.Client, archives: dict[str, bytes]
) -> None:
    body = _mutated(archives["conv"], mutate)
    report = client.post("/v1/validate", params={"level": level}, content=body, headers=JSON)
    assert report.status_code == 200, report.text
    data = report.json()
    assert not data["valid"]
    assert code in {f["code"] for f in data["findings"]}


def test_no_upload_left_behind(server: Server, client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert upload_leftovers(server) == []
