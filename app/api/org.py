"""The organization's endpoints: who am I, API tokens, model permissions, the audit log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field, StrictBool

from app.api.auth import AUTH_PROBLEMS, CallerDep, ManageDep, ensure
from app.api.deps import DateTime
from app.failure import ProblemCode
from app.http.problems import problem_responses
from app.registry.audit import AuditQuery, entries
from app.registry.auth import EVERYONE, AccessFailure, auth_configured, check_principal
from app.registry.names import check_model_name
from app.registry.records import AuditPage, Grant, Level, NewToken, TokenInfo
from app.registry.store import Registry
from app.settings import Settings

router = APIRouter(prefix="/v1", tags=["organization"])

_PROBLEMS: tuple[ProblemCode, ...] = (*AUTH_PROBLEMS, "registry-unavailable", "request-invalid")


def _registry(request: Request) -> Registry:
    registry: Registry = request.app.state.registry
    return registry


class Me(BaseModel):
    """The caller as the service sees it."""

    principal: str
    token_id: str | None
    admin: bool
    #: False: no way to authenticate is configured, every caller is the anonymous admin
    authentication: bool


@router.get("/whoami", response_model=Me, responses=problem_responses(*_PROBLEMS))
def whoami(request: Request, who: CallerDep) -> Me:
    """The principal, token and role the request's credentials stand for."""
    settings: Settings = request.app.state.settings
    identity = who.identity
    return Me(
        principal=identity.principal,
        token_id=identity.token_id,
        admin=identity.admin,
        authentication=auth_configured(settings),
    )


class MyAccess(BaseModel):
    """What the caller may do with a model (an admin: everything)."""

    principal: str
    level: Level


@router.get(
    "/models/{name}/access",
    response_model=MyAccess,
    responses=problem_responses(*_PROBLEMS, "invalid-name"),
)
def my_access(name: str, request: Request, who: CallerDep) -> MyAccess:
    """The caller's own level on the model (``none``, ``read``, ``write`` or ``manage``): what
    a client may offer its user to do, before it tries."""
    identity = who.identity
    model = check_model_name(name)
    level: Level = "manage" if identity.admin else _registry(request).access.level(identity, model)
    return MyAccess(principal=identity.principal, level=level)


class TokenRequest(BaseModel):
    """A token to create: its name, its owner (admins only: another one), admin or not."""

    name: str = Field(min_length=1, max_length=128)
    owner: str | None = Field(default=None, max_length=128)
    admin: StrictBool = False
    expires_at: DateTime | None = None


@router.post(
    "/tokens",
    status_code=201,
    response_model=NewToken,
    responses=problem_responses(*_PROBLEMS, "bad-request", "invalid-name"),
)
def create_token(body: TokenRequest, request: Request, who: CallerDep) -> NewToken:
    """Create a token; its secret is in this answer only. Anyone authenticated creates tokens
    for themselves; tokens for others and admin tokens need an admin."""
    owner = body.owner or who.identity.principal
    if (owner != who.identity.principal or body.admin) and not who.identity.admin:
        raise AccessFailure("forbidden", "only an admin creates admin tokens or others' tokens")
    access = _registry(request).access
    return access.create_token(who.actor, owner, body.name, body.admin, body.expires_at)


@router.get("/tokens", response_model=list[TokenInfo], responses=problem_responses(*_PROBLEMS))
def list_tokens(request: Request, who: CallerDep, owner: str | None = None) -> list[TokenInfo]:
    """Tokens, newest first: an admin sees everyone's (or `owner`'s), others their own."""
    if not who.identity.admin:
        owner = who.identity.principal
    return _registry(request).access.tokens(owner)


@router.delete(
    "/tokens/{token_id}",
    response_model=TokenInfo,
    responses=problem_responses(*_PROBLEMS, "token-not-found"),
)
def revoke_token(token_id: str, request: Request, who: CallerDep) -> TokenInfo:
    """Revoke a token (an admin any, others their own); it stays listed as revoked."""
    access = _registry(request).access
    if not who.identity.admin and access.token(token_id).owner != who.identity.principal:
        raise AccessFailure("forbidden", f"{token_id} is not {who.identity.principal}'s token")
    return access.revoke_token(who.actor, token_id)


class LevelBody(BaseModel):
    """A permission level."""

    level: Level


_MODEL_PROBLEMS: tuple[ProblemCode, ...] = (*_PROBLEMS, "invalid-name")


@router.get(
    "/models/{name}/permissions",
    response_model=list[Grant],
    responses=problem_responses(*_MODEL_PROBLEMS),
)
def list_permissions(name: str, request: Request, who: ManageDep) -> list[Grant]:
    """The model's grants (none: it follows the organization's default)."""
    return _registry(request).access.grants(check_model_name(name))


@router.put(
    "/models/{name}/permissions/{principal}",
    response_model=Grant,
    responses=problem_responses(*_MODEL_PROBLEMS, "bad-request"),
)
def put_permission(
    name: str, principal: str, body: LevelBody, request: Request, who: ManageDep
) -> Grant:
    """Grant `principal` (``*``: every authenticated caller) a level on the model; the model
    then no longer follows the organization's default."""
    access = _registry(request).access
    return access.grant(who.actor, check_model_name(name), principal, body.level)


@router.delete(
    "/models/{name}/permissions/{principal}",
    status_code=204,
    response_class=Response,
    responses=problem_responses(*_MODEL_PROBLEMS, "permission-not-found"),
)
def delete_permission(name: str, principal: str, request: Request, who: ManageDep) -> Response:
    """Remove a principal's grant on the model."""
    if principal != EVERYONE:
        check_principal(principal)
    _registry(request).access.revoke(who.actor, check_model_name(name), principal)
    return Response(status_code=204)


@router.get("/audit", response_model=AuditPage, responses=problem_responses(*_PROBLEMS))
def audit(
    request: Request,
    who: CallerDep,
    model: str | None = None,
    actor: str | None = None,
    action: str | None = None,
    since: DateTime | None = None,
    until: DateTime | None = None,
    # a row id: within the databases' 64-bit integers
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AuditPage:
    """The audit log, newest first, filtered; `before`: the previous page's `next`. Admins see
    everything; a model's managers see its rows (pass `model`)."""
    if model is None:
        if not who.identity.admin:
            raise AccessFailure("forbidden", "only an admin reads the whole log: pass model")
    else:
        ensure(_registry(request), who, check_model_name(model), "manage")
    query = AuditQuery(model, actor, action, since, until, before, limit)
    return entries(_registry(request).db, query)
