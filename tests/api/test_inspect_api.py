"""Inspection through the real server and the CLI, equal to the library's views."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from app import operations as ops
from app.settings import Settings
from tests.api.conftest import Server
from tests.cli.test_cli import run
from tests.zoo import ZooProgram, archive_bytes

ZIP = {"Content-Type": "application/zip"}
REQUESTS = [
    ops.InspectRequest("modules"),
    ops.InspectRequest("module-graph", depth=2),
    ops.InspectRequest("stages", stages=2, by="nodes"),
    ops.InspectRequest("partitions", supported=("aten.conv2d", "aten.relu", "aten.max_pool2d")),
    ops.InspectRequest("operators"),
    ops.InspectRequest("weights"),
]


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.mark.parametrize("request_", REQUESTS, ids=[r.view for r in REQUESTS])
def test_views_equal_the_library(
    request_: ops.InspectRequest, client: httpx.Client, zoo: dict[str, ZooProgram]
) -> None:
    data = archive_bytes(zoo["conv"].ep)
    params: dict[str, object] = {
        "view": request_.view,
        "depth": request_.depth,
        "stages": request_.stages,
        "by": request_.by,
        "supported": list(request_.supported),
    }
    answer = client.post("/v1/inspect", params=params, content=data, headers=ZIP)
    assert answer.status_code == 200, answer.text
    settings = Settings()
    with ops.open_source(data, "zip", settings) as source:
        expected = ops.inspect(source, settings, request_).model_dump(mode="json")
    assert answer.json() == {"view": request_.view, **expected}


def test_bad_knobs_are_problems(client: httpx.Client, zoo: dict[str, ZooProgram]) -> None:
    data = archive_bytes(zoo["conv"].ep)
    answer = client.post("/v1/inspect", params={"view": "nope"}, content=data, headers=ZIP)
    assert answer.status_code == 422
    assert answer.json()["code"] == "request-invalid"
    too_many = client.post(
        "/v1/inspect", params={"view": "stages", "stages": 99}, content=data, headers=ZIP
    )
    assert too_many.status_code == 422
    assert too_many.json()["code"] == "invalid-stage-count"


def test_cli_inspect(tmp_path: Path, zoo: dict[str, ZooProgram]) -> None:
    (tmp_path / "shared.pt2").write_bytes(archive_bytes(zoo["shared_sub"].ep))
    tree = run("inspect", "shared.pt2", cwd=tmp_path)
    assert tree.returncode == 0, tree.stderr
    assert "sub  tests.zoo.Sub  calls=2" in tree.stdout
    ops_json = run("inspect", "shared.pt2", "--view", "operators", "--json", cwd=tmp_path)
    assert orjson.loads(ops_json.stdout)["view"] == "operators"
