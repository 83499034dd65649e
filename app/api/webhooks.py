"""Webhook endpoints: subscribe to registry events, list and delete subscriptions, read their
deliveries. Include `router` after the registry's: its lifespan runs the outbox dispatcher on
the registry the registry router opened, and stops it when the app stops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query
from fastapi.responses import Response
from pydantic import BaseModel, Field

from app.api.auth import AUTH_PROBLEMS, Caller, CallerDep, has
from app.api.registry import RegistryDep
from app.failure import ProblemCode
from app.http.problems import problem_responses
from app.registry import webhooks as hooks
from app.registry.auth import AccessFailure
from app.registry.destinations import Destinations
from app.registry.names import check_model_name
from app.registry.records import CreatedSubscription, DeliveryPage, EventKind, Subscription
from app.registry.store import Registry


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    registry: Registry = app.state.registry
    dispatcher = hooks.Dispatcher(registry.db, app.state.settings)
    task = asyncio.create_task(dispatcher.run(), name="webhook-dispatcher")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"], lifespan=_lifespan)

_PROBLEMS: tuple[ProblemCode, ...] = (*AUTH_PROBLEMS, "registry-unavailable", "request-invalid")
_ONE_PROBLEMS: tuple[ProblemCode, ...] = (*_PROBLEMS, "webhook-not-found")


def _may(registry: Registry, who: Caller, model: str | None) -> bool:
    """Webhooks of a model are its managers' to see and change; global ones, admins'."""
    return who.identity.admin if model is None else has(registry, who, model, "manage")


def _own(registry: Registry, who: Caller, webhook_id: str) -> Subscription:
    found = hooks.get(registry.db, webhook_id)
    if not _may(registry, who, found.model):
        raise AccessFailure("forbidden", f"{who.identity.principal} may not manage {webhook_id}")
    return found


class NewSubscription(BaseModel):
    """A subscription to create: where to post, which events, of which model (None: all)."""

    url: str = Field(max_length=2000, examples=["https://ci.example.com/hooks/pt2serde"])
    events: list[EventKind] | None = Field(
        default=None, description="the event kinds to deliver; all of them when left out"
    )
    model: str | None = Field(default=None, description="one model's events; every model's if null")


class SubscriptionList(BaseModel):
    """Live subscriptions, oldest first."""

    webhooks: list[Subscription]


@router.post(
    "",
    status_code=201,
    response_model=CreatedSubscription,
    responses=problem_responses(
        *_PROBLEMS, "bad-request", "invalid-webhook", "invalid-name", "webhook-destination-refused"
    ),
)
def create_webhook(
    body: NewSubscription, who: CallerDep, registry: RegistryDep
) -> CreatedSubscription:
    """Subscribe a URL to registry events; the answer holds the signing secret, shown once.

    Each delivery is a signed POST (see `X-Pt2serde-Signature` in docs/registry.md):
    HMAC-SHA256 with the secret over ``"<t>." + body``, retried with backoff until the receiver
    answers 2xx.
    Loopback, private and link-local destinations are refused unless the operator allows them.
    A model's webhooks need `manage` on it; global ones need an admin."""
    if body.model is not None:
        check_model_name(body.model)
    if not _may(registry, who, body.model):
        raise AccessFailure("forbidden", f"{who.identity.principal} may not subscribe here")
    destinations = Destinations(registry.settings)
    return hooks.create(
        registry.db, body.url, body.events, body.model, who.actor, destinations=destinations
    )


@router.get("", response_model=SubscriptionList, responses=problem_responses(*_PROBLEMS))
def list_webhooks(
    who: CallerDep, registry: RegistryDep, model: str | None = None
) -> SubscriptionList:
    """Live subscriptions the caller manages: all, or those a model's events reach (its own
    and global ones)."""
    if model is not None:
        check_model_name(model)
    found = hooks.listing(registry.db, model)
    return SubscriptionList(webhooks=[s for s in found if _may(registry, who, s.model)])


@router.get(
    "/{webhook_id}",
    response_model=Subscription,
    responses=problem_responses(*_ONE_PROBLEMS),
)
def get_webhook(webhook_id: str, who: CallerDep, registry: RegistryDep) -> Subscription:
    """One subscription (without its secret)."""
    return _own(registry, who, webhook_id)


@router.delete(
    "/{webhook_id}",
    status_code=204,
    response_class=Response,
    responses=problem_responses(*_ONE_PROBLEMS),
)
def delete_webhook(webhook_id: str, who: CallerDep, registry: RegistryDep) -> Response:
    """Delete a subscription; deliveries not yet made are cancelled."""
    _own(registry, who, webhook_id)
    hooks.remove(registry.db, webhook_id, who.actor)
    return Response(status_code=204)


@router.get(
    "/{webhook_id}/deliveries",
    response_model=DeliveryPage,
    responses=problem_responses(*_ONE_PROBLEMS),
)
def list_deliveries(
    webhook_id: str,
    who: CallerDep,
    registry: RegistryDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
) -> DeliveryPage:
    """A subscription's deliveries, newest first: status, attempts, the last answer."""
    _own(registry, who, webhook_id)
    return hooks.deliveries(registry.db, webhook_id, limit, before)
