"""The web UI: one HTML shell for every page under /ui/ and its static assets (app/ui/).

The pages are ES modules that read only the public API (/v1/...); one file is built: the graph
layout worker (app/ui/worker/layout.js bundled with elkjs by `npm run build` in app/ui, into
app/ui/build/, which `make run`, `make test` and the Docker image do). Every answer carries a
Content-Security-Policy that allows scripts, styles and requests from this origin alone, so
that a string from an uploaded document can never run as script even if it reached the page.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse, Response

from app.http.problems import ServiceError

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
#: What `npm run build` writes (not in git), and the sources it is built from (not served).
BUNDLE = "build/layout-worker.js"
_UNSERVED = {"node_modules", "worker"}
_BUILD_HINT = "run `npm ci && npm run build` in app/ui (`make run` does)"

_log = logging.getLogger(__name__)

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
    """The files that may be served, by their path under /ui/static/ (nothing else is): the
    pages' own files and the built bundle, never npm's packages or the bundle's sources."""
    found = {
        path.relative_to(UI_DIR).as_posix(): path
        for path in sorted(UI_DIR.rglob("*"))
        if path.is_file()
        and path.suffix in _MEDIA
        and path.name != "index.html"
        and not _UNSERVED.intersection(path.relative_to(UI_DIR).parts)
    }
    # The bundle by name whether built yet or not: built after the service started, it is served.
    found[BUNDLE] = UI_DIR / BUNDLE
    return found


_ASSETS = _assets()


def check_bundle() -> None:
    """Log, at start, a service whose drawn graph cannot work for want of its built bundle."""
    if not (UI_DIR / BUNDLE).is_file():
        _log.error(
            "the web UI's %s is missing: the drawn graph cannot lay out; %s", BUNDLE, _BUILD_HINT
        )


def _preloaded_shell() -> bytes:
    """index.html with every page module named up front (`modulepreload`): the browser fetches
    them at once instead of level by level as each module's imports are read, which took three
    round trips and 0.2-0.5 s before any page began (the bundle is a worker's, not preloaded)."""
    links = "".join(
        f'<link rel="modulepreload" href="/ui/static/{name}">\n'
        for name in _ASSETS
        if name.endswith(".js") and name != BUNDLE
    )
    shell = (UI_DIR / "index.html").read_text()
    head_end = shell.index("</head>")
    return (shell[:head_end] + links + shell[head_end:]).encode()


_SHELL = _preloaded_shell()


def _shell() -> Response:
    return Response(_SHELL, media_type="text/html", headers=_HEADERS)


@router.get("/static/{asset:path}")
def asset(asset: str) -> Response:
    """A script or stylesheet of the UI."""
    path = _ASSETS.get(asset)
    if path is None:
        raise ServiceError("not-found", f"no UI asset {asset!r}")
    if not path.is_file():
        raise ServiceError("not-found", f"the UI asset {asset!r} is not built: {_BUILD_HINT}")
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
