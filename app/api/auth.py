"""Who is calling, and may they: the request dependencies of authentication and permissions.

Credentials are a bearer token (``Authorization: Bearer <token>``) or, when configured, the user
name a trusted reverse proxy puts in `identity_header`. With neither configured (the default on
loopback) every caller is the anonymous admin, as before there were identities; `refuse_open_bind`
keeps such a server off non-loopback addresses.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request, Response, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.failure import ProblemCode
from app.registry.audit import Actor
from app.registry.auth import (
    ANONYMOUS,
    AccessFailure,
    Identity,
    admin_secret,
    at_least,
    auth_configured,
    proxied_identity,
)
from app.registry.records import Level
from app.registry.store import Registry
from app.settings import Settings

#: documented in OpenAPI as the `bearer` security scheme of every route that takes credentials.
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="An API token (`pt2serde token create`, or PT2SERDE_ADMIN_TOKEN).",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: the problems of missing or invalid credentials (401), and of a route that also checks
#: permissions (403 too).
CREDENTIAL_PROBLEMS: tuple[ProblemCode, ...] = ("unauthenticated", "token-expired", "token-revoked")
AUTH_PROBLEMS: tuple[ProblemCode, ...] = (*CREDENTIAL_PROBLEMS, "forbidden", "cross-origin-refused")
#: methods that change nothing, so another site may send them along with an ambient identity
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of a request, and the actor its changes are recorded under."""

    identity: Identity
    actor: Actor


def _request_id(request: Request, response: Response) -> str:
    given = request.headers.get("x-request-id", "")
    request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
    response.headers["X-Request-ID"] = request_id
    return request_id


async def caller(
    request: Request,
    response: Response,
    credentials: Credentials,
) -> Caller:
    """The request's caller; 401 (unauthenticated, token-expired, token-revoked) without valid
    credentials once a way to authenticate is configured."""
    settings: Settings = request.app.state.settings
    client = request.client.host if request.client else ""
    request_id = _request_id(request, response)
    identity = ANONYMOUS
    proxied = request.headers.get(settings.identity_header) if settings.identity_header else None
    if proxied:
        identity = proxied_identity(proxied, settings.admin_users)
    elif credentials is not None and auth_configured(settings):
        registry: Registry = request.app.state.registry
        identity = await run_in_threadpool(registry.access.authenticate, credentials.credentials)
    elif auth_configured(settings):
        raise AccessFailure("unauthenticated", "send Authorization: Bearer <token>")
    if identity.token_id is None:
        _refuse_cross_site(request)
    return Caller(identity, Actor(identity.principal, identity.token_id, request_id, client))


def _refuse_cross_site(request: Request) -> None:
    """An ambient identity (a proxy's header, the open loopback registry's anonymous admin)
    rides along on whatever a browser sends, a form posted by another site's page included
    (a form needs no preflight): such a change, which the browser marks as coming from
    elsewhere (Fetch Metadata first, then Origin), is refused. Clients that are not browsers
    send neither header and pass; a bearer token is never ambient, so it is not checked."""
    if request.method in _SAFE_METHODS:
        return
    site = request.headers.get("sec-fetch-site")
    if site is None:
        origin = request.headers.get("origin")
        if origin is None or urlsplit(origin).netloc == request.headers.get("host"):
            return
        came = f"Origin {origin[:100]!r}"
    elif site in ("same-origin", "none"):
        return
    else:
        came = f"Sec-Fetch-Site {site[:20]!r}"
    raise AccessFailure(
        "cross-origin-refused",
        f"a {request.method} from another site ({came}) cannot act as the signed-in user; "
        "send it from this origin, or with a bearer token",
    )


CallerDep = Annotated[Caller, Depends(caller)]


def has(registry: Registry, who: Caller, model: str, level: Level) -> bool:
    """Whether `who` has `level` on `model`."""
    return who.identity.admin or at_least(registry.access.level(who.identity, model), level)


def ensure(registry: Registry, who: Caller, model: str, level: Level) -> None:
    """403 forbidden unless `who` has `level` on `model`."""
    if not has(registry, who, model, level):
        raise AccessFailure("forbidden", f"{who.identity.principal} lacks {level} on {model!r}")


def require(level: Level) -> Callable[[Request, str, Caller], Awaitable[Caller]]:
    """A dependency: the caller, once it is known to have `level` on the path's model."""

    async def check(request: Request, name: str, who: CallerDep) -> Caller:
        await run_in_threadpool(ensure, request.app.state.registry, who, name, level)
        return who

    return check


async def stateless(
    request: Request,
    response: Response,
    credentials: Credentials,
) -> None:
    """The stateless operations' gate: open, or any valid token (PT2SERDE_STATELESS_ACCESS)."""
    settings: Settings = request.app.state.settings
    if settings.stateless_access == "token":
        await caller(request, response, credentials)


async def read_or_stateless(
    request: Request,
    response: Response,
    credentials: Credentials,
) -> None:
    """The gate of a router mixing stateless operations and views of stored versions: read on
    the path's model (`{name}`) where there is one, else the stateless operations' gate."""
    name = request.path_params.get("name")
    if name is None:
        await stateless(request, response, credentials)
        return
    who = await caller(request, response, credentials)
    await run_in_threadpool(ensure, request.app.state.registry, who, name, "read")


ReadDep = Annotated[Caller, Depends(require("read"))]
WriteDep = Annotated[Caller, Depends(require("write"))]
ManageDep = Annotated[Caller, Depends(require("manage"))]


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def startup_problem(settings: Settings, host: str) -> str | None:
    """Why the server must not start on `host` with these settings (one line), or None: an
    unusable admin token, or a non-loopback address with no way to authenticate."""
    try:
        admin_secret(settings)
    except ValueError as error:
        return str(error)
    if is_loopback(host) or auth_configured(settings):
        return None
    return (
        f"refusing to serve the registry on {host} with no way to authenticate: set "
        "PT2SERDE_ADMIN_TOKEN to a random secret of 32+ characters (e.g. the output of "
        "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`), or "
        "PT2SERDE_ADMIN_TOKEN_FILE, or PT2SERDE_IDENTITY_HEADER; or bind 127.0.0.1"
    )
