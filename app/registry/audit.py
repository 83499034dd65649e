"""The audit log: one append-only row per change, written in the transaction that makes it.

`record` is the one seam every mutating registry method calls inside its transaction: a change
that commits has its row, a change that rolls back has none. The migration also refuses UPDATE
and DELETE on the table (a trigger), so the log cannot be edited through the database either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    JSON,
    Column,
    Connection,
    DateTime,
    Index,
    Integer,
    String,
    Table,
    insert,
    select,
)

from app.registry.db import Database, metadata, now, utc
from app.registry.records import AuditEntry, AuditPage

Action = Literal[
    "version.push",
    "version.delete",
    "version.verify",
    "alias.set",
    "alias.delete",
    "tag.set",
    "tag.delete",
    "model.describe",
    "permission.set",
    "permission.delete",
    "token.create",
    "token.revoke",
    "webhook.create",
    "webhook.delete",
    "webhook.pause",
]

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("at", DateTime(timezone=True), nullable=False),
    #: who: a token's owner, a trusted proxy's user, ``anonymous`` (open mode) or ``system``
    Column("actor", String(128), nullable=False),
    Column("token_id", String(32), nullable=True),
    Column("action", String(32), nullable=False),
    Column("model", String(128), nullable=True),
    Column("target", String(512), nullable=False),
    Column("before", JSON, nullable=True),
    Column("after", JSON, nullable=True),
    Column("request_id", String(128), nullable=False),
    Column("client", String(128), nullable=False),
    Index("ix_audit_log_model", "model", "id"),
    Index("ix_audit_log_actor", "actor", "id"),
)


@dataclass(frozen=True)
class Actor:
    """Who asks for a change, and through which request: what an audit row names."""

    principal: str
    #: the API token used, if any (a token's public id, never its secret)
    token_id: str | None = None
    request_id: str = ""
    client: str = ""


#: changes made through the library itself (tests, maintenance scripts), not through the API.
SYSTEM = Actor("system")


@dataclass(frozen=True)
class Change:
    """One change to record: what was done to which target, and what it was before and after."""

    actor: Actor
    action: Action
    target: str
    model: str | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    at: datetime = field(default_factory=now)


def record(conn: Connection, change: Change) -> None:
    """Append the change's row; call it inside the transaction that makes the change."""
    actor = change.actor
    conn.execute(
        insert(audit_log).values(
            at=change.at,
            actor=actor.principal,
            token_id=actor.token_id,
            action=change.action,
            model=change.model,
            target=change.target,
            before=change.before,
            after=change.after,
            request_id=actor.request_id,
            client=actor.client,
        )
    )


@dataclass(frozen=True)
class AuditQuery:
    """Filters of an audit listing (each optional) and its page."""

    model: str | None = None
    actor: str | None = None
    action: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    #: only rows older than this id (the previous page's `next`)
    before: int | None = None
    limit: int = 100


def entries(db: Database, query: AuditQuery) -> AuditPage:
    """A page of audit rows matching the query, newest first."""
    statement = select(audit_log).order_by(audit_log.c.id.desc()).limit(query.limit + 1)
    conditions = [
        (query.model, audit_log.c.model),
        (query.actor, audit_log.c.actor),
        (query.action, audit_log.c.action),
    ]
    for wanted, column in conditions:
        if wanted is not None:
            statement = statement.where(column == wanted)
    if query.since is not None:
        statement = statement.where(audit_log.c.at >= query.since)
    if query.until is not None:
        statement = statement.where(audit_log.c.at < query.until)
    if query.before is not None:
        statement = statement.where(audit_log.c.id < query.before)
    with db.read() as conn:
        rows = list(conn.execute(statement))
    page = [AuditEntry(**{**row._mapping, "at": utc(row.at)}) for row in rows[: query.limit]]
    return AuditPage(entries=page, next=page[-1].id if len(rows) > query.limit else None)
