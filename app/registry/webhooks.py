"""Webhooks: subscriptions, signed deliveries, and the dispatcher that drains the outbox.

Every delivery is a POST of the event as JSON with these headers::

    X-Pt2serde-Event: version.created
    X-Pt2serde-Event-Id: <32 hex digits, the same on every attempt>
    X-Pt2serde-Delivery: <the delivery's number>
    X-Pt2serde-Signature: t=<unix seconds of this attempt>,v1=<hex HMAC-SHA256>

where ``v1`` is HMAC-SHA256 keyed with the subscription's secret over ``"<t>." + body``. A
receiver recomputes it, compares in constant time, and refuses stale ``t`` (a replay). Any 2xx
answer is a delivery; anything else, or no answer, is retried with exponential backoff until
``webhook_max_attempts``, each attempt recorded. Only the answer's status is recorded, never its
body, and redirects are not followed. Destinations are checked by `app.registry.destinations`: a
delivery to a refused address fails at once, without a request.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import secrets
import time
import uuid
from typing import Any

import httpx
import orjson
from sqlalchemy import func, insert, select, update

from app.registry import outbox
from app.registry.audit import SYSTEM, Actor, Change, record
from app.registry.auth import Access
from app.registry.db import Database, now, utc
from app.registry.destinations import Destinations
from app.registry.errors import RegistryFailure
from app.registry.outbox import Claimed, Outcome
from app.registry.records import (
    EVENT_KINDS,
    CreatedSubscription,
    Delivery,
    DeliveryPage,
    EventKind,
    Subscription,
)
from app.settings import Settings

SIGNATURE_HEADER = "X-Pt2serde-Signature"
_SECRET_PREFIX = "whsec_"
_MAX_URL = 2000
_ERROR_CHARS = 500
log = logging.getLogger(__name__)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value for `body` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def body_of(claimed: Claimed) -> bytes:
    """The JSON a delivery posts: the same bytes on every attempt of the event."""
    return orjson.dumps(
        {
            "id": claimed.event_id,
            "type": claimed.kind,
            "model": claimed.model,
            "created_at": utc(claimed.created_at).isoformat(),
            "data": claimed.data,
        },
        option=orjson.OPT_SORT_KEYS,
    )


def _check_url(url: str) -> str:
    # parsed as the dispatcher will parse it: what it cannot post to is refused now, not at
    # every attempt (a port past 65535 would even wrap around in the resolver)
    try:
        parts = httpx.URL(url)
        valid = parts.scheme in ("http", "https") and bool(parts.host)
        valid = valid and (parts.port is None or 0 < parts.port < 65536)
    except (httpx.InvalidURL, ValueError):
        valid = False
    if not valid or len(url) > _MAX_URL:
        raise RegistryFailure(
            "invalid-webhook", f"give an http:// or https:// URL of at most {_MAX_URL} characters"
        )
    return url


def _row_subscription(row: Any) -> Subscription:
    return Subscription(
        id=row.id,
        model=row.model,
        events=row.events,
        url=row.url,
        created_at=utc(row.created_at),
        created_by=row.created_by,
        paused_at=utc(row.paused_at) if row.paused_at is not None else None,
        paused_reason=row.paused_reason,
    )


def create(
    db: Database,
    url: str,
    events: list[EventKind] | None,
    model: str | None,
    actor: Actor = SYSTEM,
    *,
    destinations: Destinations,
) -> CreatedSubscription:
    """Subscribe `url` to events (all kinds when None) of one model or, None, of every model;
    webhook-destination-refused when its host is an address `destinations` refuses."""
    _check_url(url)
    destinations.check(url)
    kinds = sorted(set(events)) if events else list(EVENT_KINDS)
    if any(k not in EVENT_KINDS for k in kinds):
        raise RegistryFailure("invalid-webhook", f"events are among {', '.join(EVENT_KINDS)}")
    secret = _SECRET_PREFIX + secrets.token_urlsafe(32)
    values = {
        "id": uuid.uuid4().hex,
        "model": model,
        "events": kinds,
        "url": url,
        "secret": secret,
        "created_at": now(),
        "created_by": actor.principal,
    }
    created = CreatedSubscription(**values)
    # the secret stays out of the audit log: it is shown to its subscriber only
    after = Subscription(**values).model_dump(mode="json")
    with db.write() as conn:
        conn.execute(insert(outbox.subscriptions).values(**values, created_token=actor.token_id))
        record(conn, Change(actor, "webhook.create", f"webhooks/{created.id}", model, after=after))
    return created


def listing(db: Database, model: str | None = None) -> list[Subscription]:
    """Live subscriptions (of `model` and global ones when given), oldest first."""
    table = outbox.subscriptions
    query = select(table).where(table.c.deleted_at.is_(None)).order_by(table.c.created_at)
    if model is not None:
        query = query.where((table.c.model == model) | table.c.model.is_(None))
    with db.read() as conn:
        return [_row_subscription(r) for r in conn.execute(query)]


def get(db: Database, subscription_id: str) -> Subscription:
    """A live subscription, or webhook-not-found."""
    table = outbox.subscriptions
    with db.read() as conn:
        row = conn.execute(
            select(table).where(table.c.id == subscription_id, table.c.deleted_at.is_(None))
        ).first()
    if row is None:
        raise RegistryFailure("webhook-not-found", f"no webhook subscription {subscription_id!r}")
    return _row_subscription(row)


def remove(db: Database, subscription_id: str, actor: Actor = SYSTEM) -> None:
    """Delete a subscription; its pending deliveries are cancelled when next claimed."""
    table = outbox.subscriptions
    live = (table.c.id == subscription_id, table.c.deleted_at.is_(None))
    with db.write() as conn:
        row = conn.execute(select(table).where(*live).with_for_update()).first()
        if row is None:
            raise RegistryFailure(
                "webhook-not-found", f"no webhook subscription {subscription_id!r}"
            )
        conn.execute(update(table).where(*live).values(deleted_at=now()))
        before = _row_subscription(row).model_dump(mode="json")
        target = f"webhooks/{subscription_id}"
        record(conn, Change(actor, "webhook.delete", target, row.model, before=before))


def pause(db: Database, subscription_id: str, reason: str) -> None:
    """Stop a subscription's deliveries for good (its pending ones cancelled), audited as the
    service's own change; pausing a paused or deleted one changes nothing."""
    table, d = outbox.subscriptions, outbox.deliveries
    live = (
        table.c.id == subscription_id,
        table.c.deleted_at.is_(None),
        table.c.paused_at.is_(None),
    )
    with db.write() as conn:
        row = conn.execute(select(table).where(*live).with_for_update()).first()
        if row is None:
            return
        stamp = now()
        conn.execute(update(table).where(*live).values(paused_at=stamp, paused_reason=reason))
        conn.execute(
            update(d)
            .where(d.c.subscription_id == subscription_id, d.c.status == "pending")
            .values(status="cancelled", claimed_until=None, last_error=f"paused: {reason}")
        )
        before = _row_subscription(row)
        after = before.model_copy(update={"paused_at": stamp, "paused_reason": reason})
        record(
            conn,
            Change(
                SYSTEM,
                "webhook.pause",
                f"webhooks/{subscription_id}",
                row.model,
                before=before.model_dump(mode="json"),
                after=after.model_dump(mode="json"),
            ),
        )


def deliveries(
    db: Database, subscription_id: str, limit: int = 100, before: int | None = None
) -> DeliveryPage:
    """A subscription's deliveries, newest first, a page at a time."""
    get(db, subscription_id)
    d, e = outbox.deliveries, outbox.events
    query = (
        select(d, e.c.kind, e.c.model)
        .join(e, e.c.id == d.c.event_id)
        .where(d.c.subscription_id == subscription_id)
        .order_by(d.c.id.desc())
        .limit(limit + 1)
    )
    if before is not None:
        query = query.where(d.c.id < before)
    with db.read() as conn:
        rows = list(conn.execute(query))
    page = [
        Delivery(
            id=r.id,
            event_id=r.event_id,
            kind=r.kind,
            model=r.model,
            status=r.status,
            attempts=r.attempts,
            last_status=r.last_status,
            last_error=r.last_error,
            next_attempt_at=utc(r.next_attempt_at),
            delivered_at=utc(r.delivered_at) if r.delivered_at is not None else None,
        )
        for r in rows[:limit]
    ]
    return DeliveryPage(deliveries=page, next=page[-1].id if len(rows) > limit else None)


def pending(db: Database) -> int:
    """Deliveries not yet delivered, given up or cancelled."""
    d = outbox.deliveries
    with db.read() as conn:
        return int(conn.execute(select(func.count()).where(d.c.status == "pending")).scalar_one())


class Dispatcher:
    """Drains the outbox: claims due deliveries, posts them signed, records each attempt."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self.destinations = Destinations(settings)
        self.access = Access(db, settings.default_permission)
        self.owner = f"{os.uname().nodename[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def backoff(self, attempt: int) -> float | None:
        """Seconds until the next attempt after failed attempt `attempt`; None: give up."""
        if attempt >= self.settings.webhook_max_attempts:
            return None
        first = self.settings.webhook_backoff_s
        return float(min(first * 2 ** (attempt - 1), self.settings.webhook_backoff_max_s))

    async def run(self) -> None:
        """Deliver until cancelled; a failing database is logged and tried again."""
        timeout = httpx.Timeout(self.settings.webhook_timeout_s)
        # no kept-alive connections: one to a pinned address may not carry another host's delivery
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False) as client:
            while True:
                try:
                    sent = await self.drain_once(client)
                except Exception:
                    # the database may be away for a while: the outbox keeps every event
                    log.exception("webhook dispatcher: a batch failed; trying again")
                    sent = 0
                if sent == 0:
                    await asyncio.sleep(self.settings.webhook_poll_s)

    async def drain_once(self, client: httpx.AsyncClient) -> int:
        """Claim one batch and deliver it; how many deliveries were attempted."""
        batch = await asyncio.to_thread(
            outbox.claim,
            self.db,
            self.owner,
            self.settings.webhook_batch,
            self.settings.webhook_lease_s,
        )
        standing = await asyncio.to_thread(self._standing, batch)
        await asyncio.gather(*(self._deliver(client, claimed) for claimed in standing))
        return len(batch)

    def _standing(self, batch: list[Claimed]) -> list[Claimed]:
        """The deliveries whose subscription's creator may still have them; the others'
        subscriptions are paused (audited, shown to the model's managers), their deliveries
        cancelled: a creator who lost manage, or whose token was revoked, hears nothing more."""
        lost: dict[str, str | None] = {}
        for claimed in batch:
            if claimed.subscription_id not in lost:
                lost[claimed.subscription_id] = self.access.lost_standing(
                    claimed.created_by,
                    claimed.created_token,
                    claimed.subscribed_model,
                    self.settings.admin_users,
                )
        for sid, reason in lost.items():
            if reason is not None:
                pause(self.db, sid, reason)
        return [c for c in batch if lost[c.subscription_id] is None]

    async def _deliver(self, client: httpx.AsyncClient, claimed: Claimed) -> None:
        started, clock = now(), time.monotonic()
        status, error, final = await self._attempt(client, claimed)
        duration = int((time.monotonic() - clock) * 1000)
        outcome = Outcome(started, duration, status, error)
        retry = None if outcome.delivered or final else self.backoff(claimed.attempt)
        await asyncio.to_thread(outbox.finish, self.db, self.owner, claimed, outcome, retry)

    async def _attempt(
        self, client: httpx.AsyncClient, claimed: Claimed
    ) -> tuple[int | None, str | None, bool]:
        """Post one delivery: the answer's status, what went wrong, and whether to give up."""
        body = body_of(claimed)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "pt2serde-webhooks",
            "X-Pt2serde-Event": claimed.kind,
            "X-Pt2serde-Event-Id": claimed.event_id,
            "X-Pt2serde-Delivery": str(claimed.delivery_id),
            SIGNATURE_HEADER: sign(claimed.secret, int(time.time()), body),
        }
        try:
            async with asyncio.timeout(self.settings.webhook_timeout_s):
                target = await self.destinations.pin(claimed.url)
                request = client.build_request(
                    "POST",
                    target.url,
                    content=body,
                    headers={**headers, "Host": target.host_header},
                    extensions={"sni_hostname": target.server_name},
                )
                # the body is never read: a receiver's answer is not the subscriber's to see
                response = await client.send(request, stream=True, follow_redirects=False)
                await response.aclose()
        except RegistryFailure as refused:
            return None, f"refused: {refused.message}"[:_ERROR_CHARS], True
        except (httpx.HTTPError, httpx.InvalidURL, OSError, TimeoutError) as failure:
            return None, f"{type(failure).__name__}: {failure}"[:_ERROR_CHARS], False
        return response.status_code, None, False
