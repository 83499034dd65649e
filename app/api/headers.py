"""Headers every answer carries, and the interactive API pages with a policy of their own.

`nosniff` goes on every answer (JSON, problems, archives, the UI), so that no browser reads an
answer as another type than the one declared: an uploaded document's strings served as JSON can
never be taken for HTML or script. The API page (/docs) is FastAPI's Swagger UI page, with Swagger
UI's code and style served by the service from a packaged copy (`swagger-ui-bundle-v2`), so that
it works offline and loads nothing from another origin; it starts with an inline script, so its
Content-Security-Policy allows exactly the inline scripts the page holds (by hash), and no
framing. (ReDoc has no packaged copy, so the service does not serve a ReDoc page.)
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from swagger_ui_bundle import swagger_ui_path

from app.http.problems import ServiceError

NOSNIFF = (b"x-content-type-options", b"nosniff")
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


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


#: Swagger UI's files the page links, served from the packaged copy under ASSETS
_ASSET_TYPES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}
ASSETS = "/docs/assets"


def page_policy(html: str) -> str:
    """The Content-Security-Policy of the API page: its own origin, its inline scripts by hash."""
    hashes = [f"'sha256-{_digest(body)}'" for body in _INLINE_SCRIPT.findall(html)]
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src 'self' {' '.join(hashes)}".rstrip(),
            # Swagger UI's widgets set style attributes; styles run no script
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            "connect-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )


def install_pages(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    """Serve /docs (Swagger UI) with its policy and its assets; the app is built with FastAPI's
    own pages off (`docs_url=None`, `redoc_url=None`)."""
    html = get_swagger_ui_html(
        openapi_url=openapi_url,
        title=f"{app.title} API",
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
    )
    app.add_api_route("/docs", _page(html), include_in_schema=False, methods=["GET"])
    app.add_api_route(f"{ASSETS}/{{name}}", _asset, include_in_schema=False, methods=["GET"])


def _page(made: HTMLResponse) -> Callable[[], HTMLResponse]:
    html = bytes(made.body).decode()
    headers = {"Content-Security-Policy": page_policy(html), "Referrer-Policy": "no-referrer"}

    def page() -> HTMLResponse:
        return HTMLResponse(html, headers=headers)

    return page


def _asset(name: str) -> FileResponse:
    """One of the files the page links (no other name: the folder is not browsable)."""
    media = _ASSET_TYPES.get(name)
    if media is None:
        raise ServiceError("not-found", f"no API page asset {name!r}")
    return FileResponse(
        Path(str(swagger_ui_path)) / name,
        media_type=media,
        headers={"Cache-Control": "public, max-age=86400"},
    )


def _digest(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
