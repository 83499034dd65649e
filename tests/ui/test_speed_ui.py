"""The UI's waiting, in Debian's Chromium against the live server: a request still running after
300 ms shows the busy indicator (and the page's main region is aria-busy) until it answers;
"Try a file" sends the file once; a stored version's answers are computed once and kept, so a
second visit computes nothing and a client holding an answer revalidates it for a 304."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Server
from tests.ui.test_ui import CHROMIUM, _small, browser, served

__all__ = ["browser"]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """The service with a registry holding two versions of a small model."""
    with served([("small", _small(extra=False)), ("small", _small(extra=True))]) as running:
        yield running


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A page in a fresh context (no HTTP cache), failing the test on a console error."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda e: errors.append(str(e)))
    yield opened
    context.close()
    assert errors == []


def test_a_slow_request_shows_the_busy_indicator(page: Any, server: Server) -> None:
    held: list[Any] = []
    # the version's ranges answer is held back until the test lets it go
    page.route("**/v1/models/small/versions/2/ranges", lambda route: held.append(route))
    page.goto(f"{server.url}/ui/models/small/versions/2")
    busy = page.wait_for_selector("#busy:not([hidden])", timeout=10_000)
    assert busy.get_attribute("role") == "status"
    bar = page.query_selector("#busy [role=progressbar]")
    assert bar is not None
    assert bar.get_attribute("aria-label")
    assert page.get_attribute("#main", "aria-busy") == "true"
    assert "Loading" in busy.inner_text()
    [route] = held
    route.continue_()
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert page.is_hidden("#busy")
    assert page.get_attribute("#main", "aria-busy") is None
    assert page.query_selector("#summary") is not None


def test_a_quick_answer_shows_no_indicator(page: Any, server: Server) -> None:
    page.goto(f"{server.url}/ui/models/small")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert page.query_selector("#busy:not([hidden])") is None


def test_try_a_file_sends_it_once(page: Any, server: Server, tmp_path: Path) -> None:
    archive = _small(extra=True, outputs=3)
    path = tmp_path / "small.pt2"
    path.write_bytes(archive)
    sent: list[Any] = []
    page.on("requestfinished", lambda r: sent.append(r) if r.method == "POST" else None)
    page.goto(f"{server.url}/ui/try")
    page.wait_for_selector("body[data-ready='1']")
    page.set_input_files("#file", str(path))
    page.wait_for_selector("body[data-done='1']", timeout=60_000)
    assert page.query_selector(".error") is None
    assert page.query_selector("#digests") is not None
    assert "valid" in page.inner_text("#valid")
    # the body's size as the browser sent it (a file's bytes are not in post_data)
    posts = [(r.url, int(r.all_headers().get("content-length", "0"))) for r in sent]
    carrying = [url for url, size in posts if size >= len(archive)]
    assert carrying == [f"{server.url}/v1/uploads"]
    named = [url for url, size in posts if "upload=" in url]
    assert len(named) == 5, posts
    assert all(size == 0 for url, size in posts if "upload=" in url)


def _kept(server: Server) -> dict[str, int]:
    folder = server.tmp / "data" / "answers"
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def test_a_second_visit_computes_nothing(browser: Any, server: Server) -> None:
    pages = ("/ui/models/small/versions/1", "/ui/models/small/diff?from=1&to=2")
    answered: list[tuple[str, int]] = []
    for visit in range(2):
        context = browser.new_context()
        page = context.new_page()
        page.on("response", lambda r: answered.append((r.url, r.status)))
        for path in pages:
            page.goto(f"{server.url}{path}")
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            assert page.query_selector(".error") is None
        context.close()
        if visit == 0:
            # the pushes computed their pages and v2's diff; the first visit read them
            kept = _kept(server)
    assert _kept(server) == kept
    assert all(status == 200 for url, status in answered if "/v1/" in url)
    # a client holding an answer revalidates it for nothing
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{server.url}/ui/")
    revalidated = page.evaluate(
        """async () => {
          const url = "/v1/models/small/versions/latest/inspect?view=operators";
          const first = await fetch(url, { cache: "no-store" });
          const etag = first.headers.get("etag");
          const again = await fetch(url, { cache: "no-store", headers: { "If-None-Match": etag } });
          return [first.status, again.status, etag];
        }"""
    )
    context.close()
    assert revalidated[:2] == [200, 304]
    assert revalidated[2] in {f'"{name.removesuffix(".json")}"' for name in kept}
