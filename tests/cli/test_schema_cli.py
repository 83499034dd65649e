"""`pt2serde schema versions | describe | compat` say the same thing about the same versions."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import schema
from app.cli import EXIT_INVALID, EXIT_OK, main
from tests.zoo import build_program, torch_json


@pytest.fixture(scope="module")
def conv_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("compat") / "conv.json"
    path.write_bytes(torch_json(build_program("conv").ep))
    return path


def test_every_listed_version_is_described_or_says_why_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema", "versions", "--json"]) == EXIT_OK
    listed = orjson.loads(capsys.readouterr().out)
    assert [v["version"] for v in listed] == [v.label for v in schema.versions()]
    assert main(["schema", "versions"]) == EXIT_OK
    text = capsys.readouterr().out.splitlines()
    for row, line in zip(listed, text, strict=True):
        assert line.split()[0] == row["version"]
        code = main(["schema", "describe", row["version"]])
        out, err = capsys.readouterr()
        if row["describable"]:
            assert code == EXIT_OK
            assert orjson.loads(out)["SCHEMA_VERSION"] == [
                int(p) for p in row["version"].split(".")
            ]
            assert "not describable" not in line
        else:
            assert code == EXIT_INVALID
            assert "not describable" in line
            releases = ", ".join(row["torch_releases"])
            assert f"schema version {row['version']} (torch {releases}) is known but not " in err
            assert err.count("\n") == 1
    assert {v["version"] for v in listed if not v["describable"]} == {"5.1", "5.3", "7.3"}


def test_compat_says_which_releases_read_ignoring_fields(
    conv_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema", "compat", str(conv_json)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert (
        "torch 2.10.0 reads it, ignoring Node.name (since 8.17), which schema 8.15 lacks: "
        "its value is lost"
    ) in lines
    assert not [line for line in lines if line.startswith("not by torch 2.10.0")]
    assert "not by torch 2.5.0: it writes schema 7.3 and refuses documents of another major " in (
        "\n".join(lines)
    )
    assert main(["schema", "compat", str(conv_json), "--json"]) == EXIT_OK
    data = orjson.loads(capsys.readouterr().out)
    ignoring = dict(data["read_ignoring"])
    assert sorted(ignoring) == ["2.10.0", "2.9.0", "2.9.1"]
    # torch 2.6 to 2.8 build each dataclass with cls(**data): the keys they lack are fatal
    refused = dict(data["not_readable_by"])
    assert (
        "unknown key Node.name (since 8.17): torch 2.8.0's reader refuses keys"
        in (refused["2.8.0"])
    )
    assert data["readable_by"][0] == "2.11.0"
