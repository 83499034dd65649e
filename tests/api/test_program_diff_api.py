"""Program diff through the real server and the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from tests.api.conftest import Server
from tests.cli.test_cli import run
from tests.zoo import archive_bytes


class _Two(torch.nn.Module):
    def __init__(self, out: int = 4) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


@pytest.fixture(scope="module")
def versions() -> dict[str, bytes]:
    torch.manual_seed(0)
    model = _Two()
    x = (torch.randn(2, 4),)
    out = {"v1": archive_bytes(torch.export.export(model, x))}
    with torch.no_grad():
        model.b.weight[1, 2] += 0.25
    out["v2"] = archive_bytes(torch.export.export(model, x))
    out["v3"] = archive_bytes(torch.export.export(_Two(out=5), x))
    return out


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def test_new_weights(client: httpx.Client, versions: dict[str, bytes]) -> None:
    answer = client.post("/v1/diff", files={"old": versions["v1"], "new": versions["v2"]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["summary"]["verdict"] == "same-graph-new-weights"
    [changed] = body["parameters"]
    assert changed["name"] == "b.weight"
    assert changed["stats"]["max_abs_diff"] == pytest.approx(0.25, rel=1e-6)
    assert changed["stats"]["differing"] == 1
    same = client.post("/v1/diff", files={"old": versions["v1"], "new": versions["v1"]})
    assert same.json()["summary"]["verdict"] == "identical"


def test_breaking_change_as_text_and_cli(
    client: httpx.Client, versions: dict[str, bytes], tmp_path: Path
) -> None:
    text = client.post(
        "/v1/diff", params={"format": "text"}, files={"old": versions["v1"], "new": versions["v3"]}
    )
    assert text.status_code == 200
    assert text.text.startswith("breaking")
    (tmp_path / "v1.pt2").write_bytes(versions["v1"])
    (tmp_path / "v3.pt2").write_bytes(versions["v3"])
    gated = run("diff", "v1.pt2", "v3.pt2", "--fail-on-breaking", cwd=tmp_path)
    assert gated.returncode == 1
    assert gated.stdout.startswith("breaking")
    plain = run("diff", "v1.pt2", "v3.pt2", cwd=tmp_path)
    assert plain.returncode == 0


def test_missing_part(client: httpx.Client, versions: dict[str, bytes]) -> None:
    answer = client.post("/v1/diff", files={"old": versions["v1"]})
    assert answer.status_code == 400
    assert answer.json()["code"] == "missing-part"
