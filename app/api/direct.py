"""The direct route of the service's most frequent small request: POST /v1/validate with a JSON
body small enough to be checked in the API process.

Before a route runs, FastAPI spends about 0.3 ms of the event loop on such a request (matching
it twice through the included routers, solving the router's credential dependency and the
query parameters): a twentieth of validating a 100-node program, and the largest share of what
the service adds to the library. This route is matched before FastAPI's, and takes only the
requests it answers exactly as the FastAPI route would (the same coroutine does the work, and
Starlette's exception wrapping hands failures to the same problem handlers). It declines the
rest, which FastAPI routes as before: another media type or a larger body, a service whose
stateless operations need a token, a parameter repeated, empty or out of its range, or a root
path. The FastAPI route also stays what OpenAPI documents.
"""

from __future__ import annotations

from typing import Any, cast, get_args
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.routing import BaseRoute, Match, NoMatchFound, request_response
from starlette.types import Receive, Scope, Send

from app.api.deps import memory_body
from app.api.programs import validated
from app.programs.findings import Level
from app.settings import Settings

_LEVELS: frozenset[str] = frozenset(get_args(Level))
#: where `matches` leaves the parsed query for the endpoint (a child scope key of our own)
_QUERY = "pt2serde.validate"


def _query(raw: bytes) -> tuple[Level, str | None] | None:
    """`level` and `model` as the FastAPI route reads them, or None where it might answer or
    read otherwise (its own defaults apply to an absent parameter; others are ignored by both)."""
    given: dict[str, str] = {}
    for key, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
        if key in ("level", "model"):
            if key in given or not value:
                return None
            given[key] = value
    level = given.get("level", "torch")
    if level not in _LEVELS:
        return None
    return cast(Level, level), given.get("model")


class DirectValidate(BaseRoute):
    """POST /v1/validate for a small JSON body, past FastAPI's routing and dependencies."""

    path_format = "/v1/validate"

    def __init__(self, settings: Settings, inline_bytes: int) -> None:
        self._open = settings.stateless_access == "open"
        self._inline_bytes = inline_bytes
        self._app = request_response(self._endpoint)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """FULL for a request this route answers as FastAPI's would; NONE for any other."""
        if (
            not self._open
            or scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"] != self.path_format
            or scope.get("root_path")
            or not memory_body(Request(scope), self._inline_bytes)
        ):
            return Match.NONE, {}
        query = _query(scope["query_string"])
        if query is None:
            return Match.NONE, {}
        return Match.FULL, {_QUERY: query}

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        """Nothing is named here (the FastAPI route holds the name)."""
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer through Starlette's request wrapper (the app's problem handlers apply)."""
        await self._app(scope, receive, send)

    @staticmethod
    async def _endpoint(request: Request) -> Any:
        level, model = request.scope[_QUERY]
        return await validated(request, level, model)
