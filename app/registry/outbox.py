"""The webhook outbox: events written in the transaction of the change they describe, one
delivery row per subscription that wants them, and the claims dispatchers take on deliveries.

A change and its event commit together or not at all, so a crash loses no event and invents
none. A dispatcher claims due deliveries by stamping `claimed_until` (a lease) in a write
transaction: on PostgreSQL with ``FOR UPDATE SKIP LOCKED`` so replicas claim disjoint rows
without waiting for each other, on SQLite under ``BEGIN IMMEDIATE`` (one writer at a time). A
dispatcher that dies mid-delivery leaves its lease to run out; the delivery is then claimed
again, so every event reaches every subscriber at least once, always under the same event id.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Connection,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    insert,
    or_,
    select,
    update,
)

from app.registry.audit import Change
from app.registry.db import Database, metadata, now
from app.registry.records import EventKind

_TIME = DateTime(timezone=True)

subscriptions = Table(
    "webhook_subscriptions",
    metadata,
    Column("id", String(32), primary_key=True),
    #: None: every model's events
    Column("model", String(128), nullable=True, index=True),
    Column("events", JSON, nullable=False),
    Column("url", Text, nullable=False),
    #: kept as given: signing needs the secret itself, not a hash of it
    Column("secret", String(128), nullable=False),
    Column("created_at", _TIME, nullable=False),
    Column("created_by", String(256), nullable=True),
    Column("deleted_at", _TIME, nullable=True),
    #: the API token the creator used (None: a proxy's identity, the open registry, the library)
    Column("created_token", String(64), nullable=True),
    #: set when the creator lost what creating it needed: nothing is delivered from then on
    Column("paused_at", _TIME, nullable=True),
    Column("paused_reason", Text, nullable=True),
)

events = Table(
    "webhook_events",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("model", String(128), nullable=False),
    Column("data", JSON, nullable=False),
    Column("created_at", _TIME, nullable=False),
)

deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("event_id", ForeignKey("webhook_events.id"), nullable=False),
    Column("subscription_id", ForeignKey("webhook_subscriptions.id"), nullable=False, index=True),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", _TIME, nullable=False),
    Column("claimed_until", _TIME, nullable=True),
    Column("claimed_by", String(64), nullable=True),
    Column("last_status", Integer, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("delivered_at", _TIME, nullable=True),
    UniqueConstraint("event_id", "subscription_id"),
    Index("ix_webhook_deliveries_status", "status", "next_attempt_at"),
)

attempts = Table(
    "webhook_attempts",
    metadata,
    Column("delivery_id", ForeignKey("webhook_deliveries.id"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("started_at", _TIME, nullable=False),
    Column("duration_ms", Integer, nullable=False),
    #: the receiver's HTTP status; None when it could not be reached
    Column("status", Integer, nullable=True),
    Column("error", Text, nullable=True),
    Column("claimed_by", String(64), nullable=False),
)


def record(conn: Connection, kind: EventKind, model: str, data: dict[str, Any]) -> str:
    """Write an event and a pending delivery per live subscription that wants it, inside the
    caller's transaction; the event's id (stable across every attempt and replica)."""
    event_id = uuid.uuid4().hex
    stamp = now()
    conn.execute(
        insert(events).values(id=event_id, kind=kind, model=model, data=data, created_at=stamp)
    )
    wanted = [
        row.id
        for row in conn.execute(
            select(subscriptions.c.id, subscriptions.c.events).where(
                subscriptions.c.deleted_at.is_(None),
                subscriptions.c.paused_at.is_(None),
                or_(subscriptions.c.model.is_(None), subscriptions.c.model == model),
            )
        )
        if kind in row.events
    ]
    if wanted:
        conn.execute(
            insert(deliveries),
            [
                {
                    "event_id": event_id,
                    "subscription_id": sid,
                    "status": "pending",
                    "attempts": 0,
                    "next_attempt_at": stamp,
                }
                for sid in wanted
            ],
        )
    return event_id


#: the audited changes subscribers hear about, as the event kind they are delivered as.
_KINDS: dict[str, EventKind] = {
    "version.push": "version.created",
    "version.delete": "version.deleted",
    "version.verify": "version.verified",
    "alias.set": "alias.moved",
    "alias.delete": "alias.moved",
    "tag.set": "tag.changed",
    "tag.delete": "tag.changed",
}


def record_change(conn: Connection, change: Change) -> str | None:
    """The event of an audited change, written in its transaction (the registry's recording
    seam calls it); its id, or None when the change is not one subscribers hear about."""
    kind = _KINDS.get(change.action)
    if kind is None or change.model is None:
        return None
    data = {
        "target": change.target,
        "actor": change.actor.principal,
        "before": change.before,
        "after": change.after,
    }
    return record(conn, kind, change.model, data)


@dataclass(frozen=True)
class Claimed:
    """A delivery this dispatcher holds until its lease ends: what to send and where."""

    delivery_id: int
    attempt: int
    event_id: str
    kind: str
    model: str
    data: dict[str, Any]
    created_at: datetime
    url: str
    secret: str
    subscription_id: str
    #: who made the subscription, and with which token: rechecked before every delivery
    created_by: str | None
    created_token: str | None
    #: the subscription's model (None: every model's events)
    subscribed_model: str | None


def claim(db: Database, owner: str, limit: int, lease_s: float) -> list[Claimed]:
    """Claim up to `limit` due deliveries (pending, not held by a live lease) for `owner`."""
    stamp = now()
    with db.write() as conn:
        due = (
            select(deliveries.c.id)
            .where(
                deliveries.c.status == "pending",
                deliveries.c.next_attempt_at <= stamp,
                or_(deliveries.c.claimed_until.is_(None), deliveries.c.claimed_until < stamp),
            )
            .order_by(deliveries.c.next_attempt_at, deliveries.c.id)
            .limit(limit)
        )
        if db.postgresql:
            due = due.with_for_update(skip_locked=True)
        ids = list(conn.execute(due).scalars())
        if not ids:
            return []
        conn.execute(
            update(deliveries)
            .where(deliveries.c.id.in_(ids))
            .values(
                claimed_until=stamp + timedelta(seconds=lease_s),
                claimed_by=owner,
                # counted when claimed, so two holders of one delivery (a lease ran out while
                # its holder still sent) record distinct attempts
                attempts=deliveries.c.attempts + 1,
            )
        )
        return _claimed(conn, ids)


def _claimed(conn: Connection, ids: list[int]) -> list[Claimed]:
    """What the claimed deliveries send; those whose subscription is gone are cancelled."""
    rows = list(
        conn.execute(
            select(
                deliveries.c.id,
                deliveries.c.attempts,
                events,
                subscriptions.c.url,
                subscriptions.c.secret,
                subscriptions.c.deleted_at,
                subscriptions.c.paused_at,
                subscriptions.c.id.label("subscription_id"),
                subscriptions.c.model.label("subscribed_model"),
                subscriptions.c.created_by,
                subscriptions.c.created_token,
            )
            .join(events, events.c.id == deliveries.c.event_id)
            .join(subscriptions, subscriptions.c.id == deliveries.c.subscription_id)
            .where(deliveries.c.id.in_(ids))
            .order_by(deliveries.c.id)
        )
    )
    gone = [r.id for r in rows if r.deleted_at is not None or r.paused_at is not None]
    if gone:
        # the subscription was deleted (or paused) after the event: nobody may have it now
        conn.execute(
            update(deliveries)
            .where(deliveries.c.id.in_(gone))
            .values(status="cancelled", claimed_until=None)
        )
    return [
        Claimed(
            delivery_id=r[0],
            attempt=r.attempts,
            event_id=r[2],
            kind=r.kind,
            model=r.model,
            data=r.data,
            created_at=r.created_at,
            url=r.url,
            secret=r.secret,
            subscription_id=r.subscription_id,
            created_by=r.created_by,
            created_token=r.created_token,
            subscribed_model=r.subscribed_model,
        )
        for r in rows
        if r.deleted_at is None and r.paused_at is None
    ]


@dataclass(frozen=True)
class Outcome:
    """What one attempt at a delivery came to."""

    started_at: datetime
    duration_ms: int
    status: int | None
    error: str | None

    @property
    def delivered(self) -> bool:
        """Whether the receiver took the event (any 2xx answer)."""
        return self.status is not None and 200 <= self.status < 300


def finish(
    db: Database, owner: str, claimed: Claimed, outcome: Outcome, retry_in_s: float | None
) -> None:
    """Record an attempt: delivered, given up (`retry_in_s` None), or due again later."""
    stamp = now()
    values: dict[str, Any] = {
        "last_status": outcome.status,
        "last_error": outcome.error,
        "claimed_until": None,
        "claimed_by": None,
    }
    if outcome.delivered:
        values.update(status="delivered", delivered_at=stamp)
    elif retry_in_s is None:
        values.update(status="failed")
    else:
        values.update(next_attempt_at=stamp + timedelta(seconds=retry_in_s))
    with db.write() as conn:
        conn.execute(
            insert(attempts).values(
                delivery_id=claimed.delivery_id,
                attempt=claimed.attempt,
                started_at=outcome.started_at,
                duration_ms=outcome.duration_ms,
                status=outcome.status,
                error=outcome.error,
                claimed_by=owner,
            )
        )
        # a dispatcher whose lease ran out may finish after another one claimed the delivery:
        # both attempts are recorded, and the one that delivered wins
        conn.execute(
            update(deliveries)
            .where(deliveries.c.id == claimed.delivery_id, deliveries.c.status == "pending")
            .values(**values)
        )
