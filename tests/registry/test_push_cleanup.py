"""A push leaves nothing in its process's staging directory once it has answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api import graphs
from app.api import registry as registry_api
from app.main import create_app
from app.settings import Settings


def test_the_upload_is_gone_before_the_graph_answer_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, archives: dict[str, bytes]
) -> None:
    """The graph answer is built after the response is sent; by then a client may already look
    at the store, so the staged upload must be removed when the route returns, not after."""
    data_dir = tmp_path / "data"
    seen: list[list[str]] = []
    original = graphs.warm

    def watching(*args: Any) -> None:
        tmp = data_dir / "tmp"
        seen.append(sorted(p.name for p in tmp.glob("*/*") if p.name != ".lock"))
        original(*args)

    monkeypatch.setattr(registry_api.graphs, "warm", watching)
    with TestClient(create_app(Settings(data_dir=data_dir))) as client:
        pushed = client.post(
            "/v1/models/clean/versions",
            content=archives["conv"],
            headers={"Content-Type": "application/zip"},
        )
    assert pushed.status_code == 201, pushed.text
    assert seen == [[]]
