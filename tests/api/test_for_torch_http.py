"""POST /v1/deserialize?for_torch=: the archive an older torch release loads, or a coded 422
problem naming the rule and the pointer, with nothing left behind."""

from __future__ import annotations

import io
import time
import zipfile

import orjson
import pytest

from tests.api.conftest import Server, upload_leftovers
from tests.zoo import ZooProgram, archive_bytes

ZIP = {"Content-Type": "application/zip"}


def _no_leftovers(server: Server) -> bool:
    """Whether the server removed every upload file (an answer's after it is sent)."""
    deadline = time.monotonic() + 10
    while upload_leftovers(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    return upload_leftovers(server) == []


def test_the_archive_for_an_older_release(server: Server, zoo: dict[str, ZooProgram]) -> None:
    with server.client() as client:
        answer = client.post(
            "/v1/deserialize",
            params={"for_torch": "2.10"},
            content=archive_bytes(zoo["conv"].ep),
            headers=ZIP,
        )
    assert answer.status_code == 200, answer.text
    with zipfile.ZipFile(io.BytesIO(answer.content)) as zf:
        [member] = [n for n in zf.namelist() if n.endswith("/models/model.json")]
        document = orjson.loads(zf.read(member))
    assert document["schema_version"] == {"major": 8, "minor": 15}
    assert all("name" not in node for node in document["graph_module"]["graph"]["nodes"])
    assert _no_leftovers(server)


@pytest.mark.parametrize(
    ("name", "release", "code", "issue"),
    [
        ("multi_out", "2.10", "downgrade-refused", "/graph_module/graph/nodes/0/name"),
        ("conv", "2.8", "release-archive-layout", None),
        ("conv", "9.9", "unknown-torch-release", None),
    ],
)
def test_a_refusal_is_a_coded_problem(
    server: Server,
    zoo: dict[str, ZooProgram],
    name: str,
    release: str,
    code: str,
    issue: str | None,
) -> None:
    with server.client() as client:
        answer = client.post(
            "/v1/deserialize",
            params={"for_torch": release},
            content=archive_bytes(zoo[name].ep),
            headers=ZIP,
        )
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["code"] == code
    assert [(e["code"], e["path"]) for e in problem["errors"]][:1] == (
        [("field-not-in-version", issue)] if issue else []
    )
    assert _no_leftovers(server)
