"""The `pt2serde` command on real archives, and one bad input per subcommand."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import torch

import schema
from app import operations as ops
from app.settings import Settings
from tests.conftest import ROOT
from tests.zoo import ZooProgram, archive_bytes, outputs_close, torch_json


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def files(zoo: dict[str, ZooProgram], tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cli")
    (folder / "conv.pt2").write_bytes(archive_bytes(zoo["conv"].ep))
    (folder / "dynamic.pt2").write_bytes(archive_bytes(zoo["dynamic"].ep))
    (folder / "conv.json").write_bytes(torch_json(zoo["conv"].ep))
    (folder / "junk.pt2").write_bytes(b"PK\x03\x04 this is not a zip")
    return folder


def _one_line_error(result: subprocess.CompletedProcess[str], code: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"pt2serde: {code}"), lines[0]
    assert "Traceback" not in result.stderr


def test_serialize_then_deserialize(files: Path, zoo: dict[str, ZooProgram]) -> None:
    ser = run("serialize", "conv.pt2", "-o", "docs.json", "--weights", "w.safetensors", cwd=files)
    assert ser.returncode == 0, ser.stderr
    assert "weights: 4 tensors" in ser.stdout
    docs = orjson.loads((files / "docs.json").read_bytes())
    assert docs["documents"]["model"] == orjson.loads(torch_json(zoo["conv"].ep))
    (files / "doc.json").write_bytes(orjson.dumps(docs["documents"]["model"]))
    de = run("deserialize", "doc.json", "--weights", "w.safetensors", "-o", "out.pt2", cwd=files)
    assert de.returncode == 0, de.stderr
    # written by our own CLI from a program this test exported
    loaded = torch.export.load(io.BytesIO((files / "out.pt2").read_bytes()))
    program = zoo["conv"]
    assert outputs_close(loaded.module()(*program.args), program.run())


def test_canonicalize_and_hash_agree_with_library(files: Path) -> None:
    settings = Settings()
    with ops.open_source(files / "dynamic.pt2", "zip", settings) as source:
        expected = ops.canonical(source, settings)
    can = run("canonicalize", "dynamic.pt2", "-o", "canon.json", "--json", cwd=files)
    assert can.returncode == 0, can.stderr
    assert (files / "canon.json").read_bytes() == expected.data
    assert orjson.loads(can.stdout)["digests"]["program"] == expected.digests.program
    hashed = run("hash", "dynamic.pt2", cwd=files)
    assert hashed.returncode == 0, hashed.stderr
    assert f"program  {expected.digests.program}" in hashed.stdout


def test_hash_of_a_document_says_it_holds_no_weights(files: Path) -> None:
    """A JSON document holds no weights: no weights or program digest (they were the empty
    set's, the same for every model), only its graph's."""
    settings = Settings()
    with ops.open_source(files / "conv.json", "json", settings) as source:
        expected = ops.canonical(source, settings)
    hashed = run("hash", "conv.json", "--json", cwd=files)
    assert hashed.returncode == 0, hashed.stderr
    digests = orjson.loads(hashed.stdout)["digests"]
    assert digests == {"graph": expected.digests.graph, "weights": None, "program": None}
    human = run("hash", "conv.json", cwd=files).stdout.splitlines()
    assert human[0] == f"graph    {expected.digests.graph}"
    assert human[1].startswith("weights  none: a JSON document holds no weights")


def test_validate_levels(files: Path) -> None:
    ok = run("validate", "conv.pt2", "--json", cwd=files)
    assert ok.returncode == 0, ok.stderr
    report = orjson.loads(ok.stdout)
    assert report["valid"]
    assert report["level"] == "torch"
    broken = orjson.loads((files / "conv.json").read_bytes())
    broken["graph_module"]["graph"]["nodes"].pop(0)
    (files / "broken.json").write_bytes(orjson.dumps(broken))
    bad = run("validate", "broken.json", "--level", "semantic", cwd=files)
    assert bad.returncode == 1
    assert "INVALID at level semantic" in bad.stdout
    assert "name-undefined" in bad.stdout


def test_schema_commands(files: Path) -> None:
    versions = run("schema", "versions", "--json", cwd=files)
    assert versions.returncode == 0
    assert [v["version"] for v in orjson.loads(versions.stdout)] == [
        v.label for v in schema.versions()
    ]
    described = run("schema", "describe", "8.14", cwd=files)
    assert orjson.loads(described.stdout) == schema.describe("8.14")


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("serialize", "junk.pt2"), "archive-truncated"),
        (("canonicalize", "missing.pt2"), "io-error"),
        (("hash", "junk.pt2"), "archive-truncated"),
        (("validate", "junk.pt2"), "archive-truncated"),
        (("schema", "describe", "9.1"), "unknown-schema-version"),
    ],
)
def test_bad_input_exits_1_with_one_line(files: Path, args: tuple[str, ...], code: str) -> None:
    result = run(*args, cwd=files)
    assert result.returncode == 1, result.stderr
    _one_line_error(result, code)
    assert not (files / "never.pt2").exists()
    assert not [p for p in files.iterdir() if p.name.startswith(".never.pt2")]


@pytest.mark.parametrize("args", [("bogus",), ("validate",), ("validate", "x", "--level", "nope")])
def test_usage_errors_exit_2(files: Path, args: tuple[str, ...]) -> None:
    result = run(*args, cwd=files)
    assert result.returncode == 2
    _one_line_error(result, "usage error")
