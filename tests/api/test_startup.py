"""What an HTTP process does before it takes a connection: every route's handler is built then,
so the first visits after a restart do not each pay for building theirs (0.6-0.7 s per process
on 2 cores, FastAPI building a route's handler at its first request)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import routing
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings

#: one route of each router the pages and clients reach first
FIRST_VISITS = (
    "/healthz",
    "/ui/",
    "/ui/static/app.js",
    "/v1/models",
    "/v1/schemas/versions",
    "/v1/search?q=x",
)


def test_routes_built_before_the_first_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        data_dir=tmp_path, document_workers=1, workers=1, document_workers_at_start=False
    )
    built: list[str] = []
    original = routing._EffectiveRouteContext.from_api_route.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, *, original_route: Any, include_context: Any) -> Any:
        built.append(original_route.path)
        return original(cls, original_route=original_route, include_context=include_context)

    monkeypatch.setattr(routing._EffectiveRouteContext, "from_api_route", classmethod(counted))
    with TestClient(create_app(settings)) as client:
        at_start = len(built)
        answers = {path: client.get(path).status_code for path in FIRST_VISITS}
    assert at_start > 0
    assert built[at_start:] == [], "routes built by the first requests"
    assert all(status < 500 for status in answers.values()), answers
