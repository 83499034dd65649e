"""GET /v1/problems serves the whole catalogue: every code with its status and title."""

from __future__ import annotations

import asyncio

import httpx

from app.api import catalogue
from app.http.problems import CATALOGUE
from app.main import create_app
from app.settings import Settings


def _get(path: str) -> httpx.Response:
    """A GET on the app built by create_app(), in process (no server, no lifespan)."""
    app = create_app(Settings())

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://pt2serde") as client:
            return await client.get(path)

    return asyncio.run(get())


def test_every_catalogued_code_is_served() -> None:
    answer = _get("/v1/problems")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    served = answer.json()
    assert served == [
        {"code": code, "status": kind.status, "title": kind.title}
        for code, kind in sorted(CATALOGUE.items())
    ]
    assert {entry["code"] for entry in served} == set(CATALOGUE)


def test_the_library_function_matches_the_catalogue() -> None:
    entries = catalogue.catalogue_entries()
    assert [e.code for e in entries] == sorted(CATALOGUE)
    assert all(CATALOGUE[e.code].status == e.status for e in entries)
    assert all(CATALOGUE[e.code].title == e.title for e in entries)
    assert "unsafe-pickle" in {e.code for e in entries}
