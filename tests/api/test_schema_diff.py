"""Schema diff and compat through the real server, and the CLI's verdict exit codes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import schema
from tests.api.conftest import Server
from tests.cli.test_cli import run
from tests.zoo import ZooProgram, torch_json


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def test_diff_known_versions(client: httpx.Client) -> None:
    answer = client.get("/v1/schema/diff", params={"from": "8.8", "to": "8.14", "mode": "FORWARD"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = schema.diff("8.8", "8.14")
    assert [(c["rule"], c["path"]) for c in body["changes"]] == [
        (c.rule, c.path) for c in expected.changes
    ]
    verdict = body["verdict"]
    assert not verdict["ok"]
    assert not verdict["numbers_follow_rules"]
    assert {v["path"] for v in verdict["violations"]} == {
        c.path for c in schema.compatibility("8.8", "8.14", "FORWARD").violations
    }
    markdown = client.get(
        "/v1/schema/diff", params={"from": "8.8", "to": "8.14", "format": "markdown"}
    )
    assert markdown.headers["content-type"].startswith("text/markdown")
    assert markdown.text == schema.changelog(expected)


def test_diff_uploaded_descriptions(client: httpx.Client, history_dir: Path) -> None:
    old = (history_dir / "torch-2.3.0.schema.yaml").read_bytes()
    new = (history_dir / "torch-2.4.0.schema.yaml").read_bytes()
    answer = client.post(
        "/v1/schema/diff", params={"mode": "BACKWARD"}, files={"old": old, "new": new}
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["old_version"], body["new_version"], body["required_bump"]) == (
        "5.1",
        "5.3",
        "major",
    )
    assert not body["verdict"]["numbers_follow_rules"]
    bad = client.post("/v1/schema/diff", files={"old": b"a: [", "new": new})
    assert bad.status_code == 422
    assert bad.json()["code"] == "invalid-description"
    unknown = client.get("/v1/schema/diff", params={"from": "8.9", "to": "8.20"})
    assert unknown.status_code == 404
    assert unknown.json()["code"] == "unknown-schema-version"


def test_compat(client: httpx.Client, zoo: dict[str, ZooProgram]) -> None:
    raw = torch_json(zoo["conv"].ep)
    answer = client.post("/v1/compat", content=raw, headers={"Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text
    expected = schema.compat(raw)
    assert answer.json()["readable_by"] == expected.readable_by
    assert "2.10.0" not in answer.json()["readable_by"]  # Node.name appeared in 8.17 (torch 2.11)
    ignoring = [{"release": r, "note": n} for r, n in expected.read_ignoring]
    assert answer.json()["read_ignoring"] == ignoring
    assert "2.10.0" in [r["release"] for r in ignoring]  # it reads conv, skipping Node.name


def test_cli_verdict_exit_codes(tmp_path: Path, history_dir: Path) -> None:
    holds = run("schema", "diff", "8.15", "8.17", "--mode", "backward", cwd=tmp_path)
    assert holds.returncode == 0, holds.stderr
    assert "BACKWARD holds" in holds.stdout
    fails = run("schema", "diff", "8.8", "8.14", "--mode", "FORWARD", cwd=tmp_path)
    assert fails.returncode == 1
    assert "FORWARD FAILS: 4 violation(s)" in fails.stdout
    files = run(
        "schema",
        "diff",
        str(history_dir / "torch-2.12.0.schema.yaml"),
        str(history_dir / "torch-2.13.0.schema.yaml"),
        "--mode",
        "FULL",
        cwd=tmp_path,
    )
    assert files.returncode == 0
    assert "0 changes" in files.stdout
