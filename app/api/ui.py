"""The web UI: one HTML shell for every page under /ui/ and its static assets (app/ui/).

The pages are ES modules that read only the public API (/v1/...). Every answer carries a
Content-Security-Policy that allows scripts, styles and requests from this origin alone, so
that a string from an uploaded document can never run as script even if it reached the page.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse, Response

from app.http.problems import ServiceError

UI_DIR = Path(__file__).resolve().parent.parent / "ui"

#: No inline script or style, nothing from elsewhere, no framing, no plugins.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_MEDIA = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}

router = APIRouter(prefix="/ui", include_in_schema=False)


def _assets() -> dict[str, Path]:
    """The files that may be served, by their path under /ui/static/ (nothing else is)."""
    return {
        path.relative_to(UI_DIR).as_posix(): path
        for path in sorted(UI_DIR.rglob("*"))
        if path.is_file() and path.suffix in _MEDIA and path.name != "index.html"
    }


_ASSETS = _assets()


def _shell() -> Response:
    return FileResponse(UI_DIR / "index.html", media_type="text/html", headers=_HEADERS)


@router.get("/static/{asset:path}")
def asset(asset: str) -> Response:
    """A script or stylesheet of the UI."""
    path = _ASSETS.get(asset)
    if path is None:
        raise ServiceError("not-found", f"no UI asset {asset!r}")
    return FileResponse(path, media_type=_MEDIA[path.suffix], headers=_HEADERS)


@router.get("")
def bare() -> Response:
    """/ui -> /ui/."""
    return RedirectResponse("/ui/", status_code=308)


@router.get("/")
@router.get("/{page:path}")
def page(page: str = "") -> Response:
    """Every page is the same shell; the script draws the page its URL names."""
    return _shell()
