"""A body that is plainly not JSON (a .pt2 sent as application/json, as HTTPie does by default;
random or pickled bytes) is named for what it is, with the fix, by the library, the CLI and the
service alike, not with the parser's "str is not valid UTF-8"."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

import schema
from app import cli
from tests.api.conftest import Server


def _zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("model/data.pkl", b"\x80\x02}q\x00.")
    return out.getvalue()


BODIES = {
    "zip": (
        _zip(),
        "this is a zip archive (a .pt2?), not a JSON document: send it as application/zip",
    ),
    "random": (
        b"\x93" + os.urandom(2999),
        "binary data, not a JSON document: byte 0 is not UTF-8 text",
    ),
    "pickle": (b"\x80\x02}q\x00.", "binary data, not a JSON document: byte 0 is not UTF-8 text"),
}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_the_library_says_what_the_bytes_are(kind: str) -> None:
    body, said = BODIES[kind]
    for reader in (schema.read, schema.upgrade):
        with pytest.raises(schema.DocumentInvalid) as caught:
            reader(body)
        assert [(i.code, i.message) for i in caught.value.issues] == [("invalid-json", said)]


def test_text_that_is_not_json_keeps_the_parser_s_complaint() -> None:
    with pytest.raises(schema.DocumentInvalid) as caught:
        schema.upgrade(b"graph_module: {}")
    assert "not a JSON document" not in caught.value.issues[0].message


@pytest.mark.parametrize("kind", sorted(BODIES))
@pytest.mark.parametrize("path", ["/v1/validate?level=semantic", "/v1/canonicalize", "/v1/compat"])
def test_the_service_says_it_in_a_coded_422(server: Server, kind: str, path: str) -> None:
    body, said = BODIES[kind]
    with server.client() as client:
        answer = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["code"] == "invalid-document"
    assert problem["detail"] == f"/: {said}"


@pytest.mark.parametrize("kind", ["random", "pickle"])
def test_the_cli_says_it_in_one_line(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body, said = BODIES[kind]
    path = tmp_path / "model.bin"
    path.write_bytes(body)
    assert cli.main(["validate", str(path), "--level", "semantic"]) == cli.EXIT_INVALID
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"pt2serde: invalid-document: /: {said}"
    assert "Traceback" not in err
