"""`pt2serde deserialize --for-torch`: the archive an older torch release loads, or a one-line
refusal with its code and nothing written."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import orjson
import pytest
import torch

from tests.cli.test_cli import run
from tests.zoo import ZooProgram, archive_bytes, outputs_close


@pytest.fixture(scope="module")
def folder(zoo: dict[str, ZooProgram], tmp_path_factory: pytest.TempPathFactory) -> Path:
    made = tmp_path_factory.mktemp("for_torch")
    for name in ("conv", "multi_out"):
        (made / f"{name}.pt2").write_bytes(archive_bytes(zoo[name].ep))
    return made


def _document(archive: Path) -> dict[str, object]:
    with zipfile.ZipFile(archive) as zf:
        [member] = [n for n in zf.namelist() if n.endswith("/models/model.json")]
        document: dict[str, object] = orjson.loads(zf.read(member))
    return document


def test_the_archive_for_an_older_release(folder: Path, zoo: dict[str, ZooProgram]) -> None:
    done = run("deserialize", "conv.pt2", "--for-torch", "2.10", "-o", "old.pt2", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert "for torch 2.10 (schema 8.15)" in done.stdout
    document = _document(folder / "old.pt2")
    assert document["schema_version"] == {"major": 8, "minor": 15}
    graph = document["graph_module"]["graph"]  # type: ignore[index]
    assert all("name" not in node for node in graph["nodes"])
    # written by our own CLI from a program this test exported; torch 2.13 reads 8.15 too
    loaded = torch.export.load(io.BytesIO((folder / "old.pt2").read_bytes()))
    program = zoo["conv"]
    assert outputs_close(loaded.module()(*program.args), program.run())
    assert [n.name for n in loaded.graph.nodes] == [n.name for n in program.ep.graph.nodes]


@pytest.mark.parametrize(
    ("name", "release", "code", "issue"),
    [
        ("multi_out", "2.10", "downgrade-refused", "/graph_module/graph/nodes/0/name"),
        ("conv", "2.8", "release-archive-layout", None),
        ("conv", "9.9", "unknown-torch-release", None),
    ],
)
def test_a_refusal_is_one_line_and_nothing_is_written(
    folder: Path, name: str, release: str, code: str, issue: str | None
) -> None:
    before = sorted(p.name for p in folder.iterdir())
    done = run("deserialize", f"{name}.pt2", "--for-torch", release, "-o", "no.pt2", cwd=folder)
    assert done.returncode != 0
    first, *issues = done.stderr.strip().splitlines()
    assert first.startswith(f"pt2serde: {code}: "), first
    assert "Traceback" not in done.stderr
    # the refusal's issues follow, one line each, the rule and the pointer first
    assert [line.split()[:2] for line in issues][:1] == (
        [["field-not-in-version", issue]] if issue else []
    )
    assert sorted(p.name for p in folder.iterdir()) == before
