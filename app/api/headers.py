"""Headers every answer carries, and the interactive API pages with a policy of their own.

`nosniff` goes on every answer (JSON, problems, archives, the UI), so that no browser reads an
answer as another type than the one declared: an uploaded document's strings served as JSON can
never be taken for HTML or script. The API pages (/docs, /redoc) are FastAPI's, which load their
code from a CDN and start it with an inline script: their Content-Security-Policy allows that
CDN and exactly the inline scripts the page holds (by hash), and no framing.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

NOSNIFF = (b"x-content-type-options", b"nosniff")
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)
_LINKED = re.compile(r"""(?:src|href)="(https://[^"]+)\"""")


class NoSniff:
    """ASGI middleware: `X-Content-Type-Options: nosniff` on every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; add the header to the answer's start unless it is there."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if all(name.lower() != NOSNIFF[0] for name, _ in headers):
                    message = {**message, "headers": [*headers, NOSNIFF]}
            await send(message)

        await self.app(scope, receive, sending)


def page_policy(html: str) -> str:
    """The Content-Security-Policy of an API page: its CDN origins, its inline scripts by hash."""
    origins = sorted({_origin(url) for url in _LINKED.findall(html)})
    hashes = [f"'sha256-{_digest(body)}'" for body in _INLINE_SCRIPT.findall(html)]
    cdn = " ".join(origins)
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src 'self' {cdn} {' '.join(hashes)}".rstrip(),
            # the pages' own widgets set style attributes; styles run no script
            f"style-src 'self' 'unsafe-inline' {cdn}",
            f"img-src 'self' data: {cdn}",
            # Google's font stylesheets (ReDoc's) load their fonts from this second origin
            f"font-src {cdn} https://fonts.gstatic.com",
            # ReDoc runs its search in a worker made from a blob
            "worker-src blob:",
            "connect-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )


def install_pages(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    """Serve /docs (Swagger UI) and /redoc (ReDoc) with their policies; the app is built with
    FastAPI's own pages off (`docs_url=None`, `redoc_url=None`)."""
    title = f"{app.title} API"
    pages: dict[str, Callable[[], HTMLResponse]] = {
        "/docs": lambda: get_swagger_ui_html(openapi_url=openapi_url, title=title),
        "/redoc": lambda: get_redoc_html(openapi_url=openapi_url, title=title),
    }
    for path, make in pages.items():
        app.add_api_route(path, _page(make), include_in_schema=False, methods=["GET"])


def _page(make: Callable[[], HTMLResponse]) -> Callable[[], HTMLResponse]:
    made = make()
    html = bytes(made.body).decode()
    headers = {"Content-Security-Policy": page_policy(html), "Referrer-Policy": "no-referrer"}

    def page() -> HTMLResponse:
        return HTMLResponse(html, headers=headers)

    return page


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _digest(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
