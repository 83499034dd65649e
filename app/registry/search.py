"""Searching versions across models: by tag, alias, digest, operator namespace, schema version,
whether torch verified them, who pushed them and when, newest first, a page at a time.

Every filter narrows (they combine with AND); a tag filter is a key (``stage``) or a key and its
value (``stage=prod``), and several tag filters must all hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    ForeignKey,
    Row,
    Select,
    String,
    Table,
    exists,
    insert,
    select,
)

from app.registry.db import aliases, metadata, models, tags, versions
from app.registry.errors import RegistryFailure
from app.registry.records import SearchPage, VersionInfo

version_namespaces = Table(
    "version_namespaces",
    metadata,
    Column("version_id", ForeignKey("versions.id"), primary_key=True),
    Column("namespace", String(128), primary_key=True, index=True),
)

_DIGEST_CHARS = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class SearchQuery:
    """What to look for; None (or empty) leaves that property free."""

    model: str | None = None
    #: (key, value) pairs; a value of None asks only that the key is set
    tags: tuple[tuple[str, str | None], ...] = ()
    alias: str | None = None
    program_digest: str | None = None
    graph_digest: str | None = None
    #: an operator namespace the program calls into (``aten``, ``my_ops``)
    namespace: str | None = None
    schema_version: str | None = None
    #: verified by torch's own check (True) or stored unverified (False)
    verified: bool | None = None
    pushed_by: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    include_deleted: bool = False


def parse_tag(text: str) -> tuple[str, str | None]:
    """``key`` or ``key=value`` as a tag filter."""
    key, equals, value = text.partition("=")
    if not key:
        raise RegistryFailure("invalid-search", f"a tag filter is key or key=value, not {text!r}")
    return key, value if equals else None


def _digest(value: str, what: str) -> str:
    if len(value) != 64 or not set(value) <= _DIGEST_CHARS:
        raise RegistryFailure("invalid-search", f"the {what} digest is 64 lowercase hex digits")
    return value


def _conditions(query: SearchQuery) -> list[Any]:
    where: list[Any] = []
    if not query.include_deleted:
        where.append(versions.c.deleted_at.is_(None))
    if query.model is not None:
        where.append(models.c.name == query.model)
    for key, value in query.tags:
        tagged = (tags.c.version_id == versions.c.id) & (tags.c.key == key)
        if value is not None:
            tagged = tagged & (tags.c.value == value)
        where.append(exists().where(tagged))
    if query.alias is not None:
        where.append(
            exists().where(aliases.c.version_id == versions.c.id, aliases.c.alias == query.alias)
        )
    if query.program_digest is not None:
        where.append(versions.c.program_digest == _digest(query.program_digest, "program"))
    if query.graph_digest is not None:
        where.append(versions.c.graph_digest == _digest(query.graph_digest, "graph"))
    if query.namespace is not None:
        ns = version_namespaces.c
        where.append(
            exists().where(ns.version_id == versions.c.id, ns.namespace == query.namespace)
        )
    if query.schema_version is not None:
        where.append(versions.c.schema_version == query.schema_version)
    if query.verified is not None:
        where.append(versions.c.verified.is_(query.verified))
    if query.pushed_by is not None:
        where.append(versions.c.created_by == query.pushed_by)
    if query.created_after is not None:
        where.append(versions.c.created_at >= query.created_after)
    if query.created_before is not None:
        where.append(versions.c.created_at < query.created_before)
    return where


def statement(
    query: SearchQuery, limit: int, after: int | None, visible: ColumnElement[bool] | None = None
) -> Select[Any]:
    """The versions (with their model's name as ``model_name``) matching `query` and, when
    given, the condition `visible` on their model, newest first, `limit` of them after the
    cursor `after` (a previous page's `next`)."""
    if (
        query.created_after is not None
        and query.created_before is not None
        and query.created_after >= query.created_before
    ):
        raise RegistryFailure("invalid-search", "created_after must come before created_before")
    found = (
        select(versions, models.c.name.label("model_name"))
        .join(models, models.c.id == versions.c.model_id)
        .where(*_conditions(query))
        .order_by(versions.c.id.desc())
        .limit(limit)
    )
    if after is not None:
        found = found.where(versions.c.id < after)
    if visible is not None:
        found = found.where(visible)
    return found


#: VersionInfo of rows of one model's versions (the store's reader).
Infos = Callable[[Connection, str, Sequence[Row[Any]]], list[VersionInfo]]


def find(
    conn: Connection,
    query: SearchQuery,
    limit: int,
    after: int | None,
    infos: Infos,
    visible: ColumnElement[bool] | None = None,
) -> SearchPage:
    """One page of the versions matching `query` (and `visible`), read by `infos`."""
    rows = list(conn.execute(statement(query, limit + 1, after, visible)))
    page = rows[:limit]
    by_model: dict[str, list[Row[Any]]] = {}
    for row in page:
        by_model.setdefault(row.model_name, []).append(row)
    found: dict[int, VersionInfo] = {}
    for name, group in by_model.items():
        found.update(zip((r.id for r in group), infos(conn, name, group), strict=True))
    return SearchPage(
        versions=[found[r.id] for r in page], next=page[-1].id if len(rows) > limit else None
    )


def index_namespaces(conn: Connection, version_id: int, namespaces: list[str]) -> None:
    """Record the operator namespaces a new version's program uses, for search."""
    if namespaces:
        conn.execute(
            insert(version_namespaces),
            [{"version_id": version_id, "namespace": ns} for ns in sorted(set(namespaces))],
        )
