"""The version page says how far a version was checked: a small "unverified: <namespaces>" badge
and summary row for one stored short of torch's check, the torch release for one torch built."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import torch

from tests.api.conftest import Server, start_server, stop_server
from tests.ui.test_ui import ARGS, CHROMIUM
from tests.zoo import archive_bytes, build_program

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")

sync_api = pytest.importorskip("playwright.sync_api")

#: workers without the zoo's pt2zoo namespace, and an organization that stores such pushes
ENV = {
    "PT2SERDE_HTTP_WORKERS": "1",
    "PT2SERDE_WORKERS": "1",
    "PT2SERDE_WORKER_IMPORTS": "",
    "PT2SERDE_ALLOW_UNVERIFIED": "true",
}


@pytest.fixture(scope="module")
def served() -> Iterator[Server]:
    running = start_server(ENV)
    try:
        with running.client(timeout=120) as client:
            for name in ("custom_op", "conv"):
                answer = client.post(
                    f"/v1/models/{name}/versions",
                    content=_archive(name),
                    headers={"Content-Type": "application/zip"},
                )
                assert answer.status_code == 201, answer.text
        yield running
    finally:
        stop_server(running)


def _archive(name: str) -> bytes:
    return archive_bytes(build_program(name).ep)


def _page_text(served: Server, name: str) -> tuple[str, str, list[str]]:
    """The badge's text ("" when there is none), the summary, and the console's errors."""
    errors: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{served.url}/ui/models/{name}/versions/1")
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            badge = page.locator("#unverified")
            text = badge.inner_text() if badge.count() else ""
            return text, page.locator("#summary").inner_text(), errors
        finally:
            browser.close()


def test_the_version_page_shows_the_state(served: Server) -> None:
    version = httpx.get(f"{served.url}/v1/models/custom_op/versions/1").json()
    assert version["verification"] == {"state": "unverified", "namespaces": ["pt2zoo"]}
    badge, summary, errors = _page_text(served, "custom_op")
    assert (badge, errors) == ("unverified: pt2zoo", [])
    assert "torch's check needs the namespaces pt2zoo" in summary
    badge, summary, errors = _page_text(served, "conv")
    assert (badge, errors) == ("", [])
    assert f"by torch {torch.__version__.split('+')[0]}" in summary
