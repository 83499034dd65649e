"""The API page (/docs) in a real browser with every other origin cut off: Swagger UI's code and
style come from the service itself, the page lists every documented operation, and nothing is
fetched from anywhere else (it was blank offline while Swagger UI came from a CDN)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.api.conftest import SERVER_ENV, Server, start_server, stop_server
from tests.ui.test_ui import ARGS, CHROMIUM

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")

sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def served() -> Iterator[Server]:
    running = start_server(SERVER_ENV)
    try:
        yield running
    finally:
        stop_server(running)


def test_the_api_page_works_with_no_other_origin(served: Server) -> None:
    elsewhere: list[str] = []
    errors: list[str] = []
    own = urlsplit(served.url).netloc

    def only_own(route: Any) -> None:
        if urlsplit(route.request.url).netloc == own:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    operations = {
        (method, path)
        for path, item in httpx.get(f"{served.url}/openapi.json", timeout=60)
        .json()["paths"]
        .items()
        for method in item
    }
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.route("**/*", only_own)
            page.goto(f"{served.url}/docs")
            page.wait_for_selector(".opblock", timeout=30_000)
            shown = page.locator(".opblock").count()
            title = page.locator(".info .title").inner_text()
        finally:
            browser.close()
    assert elsewhere == []
    assert errors == []
    assert shown == len(operations)
    assert title.startswith("pt2serde")


def test_only_the_page_s_own_assets_are_served(served: Server) -> None:
    with httpx.Client(base_url=served.url) as client:
        for name, media in [
            ("swagger-ui-bundle.js", "text/javascript"),
            ("swagger-ui.css", "text/css"),
            ("favicon-32x32.png", "image/png"),
        ]:
            answer = client.get(f"/docs/assets/{name}")
            assert answer.status_code == 200
            assert answer.headers["content-type"].split(";")[0] == media
            assert answer.headers["x-content-type-options"] == "nosniff"
        for name in ["index.html", "..%2F..%2F__init__.py", "swagger-initializer.js"]:
            answer = client.get(f"/docs/assets/{name}")
            assert answer.status_code == 404
            assert answer.json()["code"] == "not-found"
