"""Quotas per model and per token, checked inside the write transaction they bound.

The counts are read in the transaction that adds the row they count, after the locks that
serialize such transactions: SQLite runs one writer at a time (``BEGIN IMMEDIATE``); on
PostgreSQL every write locks its model's row, and a push also locks its token's row, so two
concurrent clients can never both pass a check that only one of them fits under. Pushes per
hour answer 429 with Retry-After (waiting helps); the other quotas answer 422 (it does not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, func, select

from app.registry.audit import Actor
from app.registry.auth import api_tokens
from app.registry.db import aliases, now, tags, utc, versions
from app.registry.errors import RegistryFailure
from app.settings import Settings

_HOUR = timedelta(hours=1)


class RateLimited(RegistryFailure):
    """Over a per-hour quota: 429, with the seconds until a slot frees as Retry-After."""

    code = "rate-limited"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(self.code, f"{message}; retry in {retry_after} s")
        self.headers = {"Retry-After": str(retry_after)}


@dataclass(frozen=True)
class Quotas:
    """The limits (0: none) as the settings give them."""

    versions_per_hour: int
    token_versions_per_hour: int
    tags_per_version: int
    aliases_per_model: int
    tag_value_bytes: int
    model_bytes: int
    token_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> Quotas:
        """The quotas a registry with these settings enforces."""
        return cls(
            versions_per_hour=settings.quota_versions_per_hour,
            token_versions_per_hour=settings.quota_token_versions_per_hour,
            tags_per_version=settings.quota_tags_per_version,
            aliases_per_model=settings.quota_aliases_per_model,
            tag_value_bytes=settings.quota_tag_value_bytes,
            model_bytes=settings.quota_model_bytes,
            token_bytes=settings.quota_token_bytes,
        )


def _over(limit: int, used: int, adding: int = 1) -> bool:
    return limit > 0 and used + adding > limit


def _hourly(conn: Connection, where: Any, limit: int, what: str) -> None:
    """429 when `limit` versions matching `where` were created within the last hour."""
    if limit <= 0:
        return
    since = now() - _HOUR
    found = conn.execute(
        select(func.count(), func.min(versions.c.created_at)).where(
            where, versions.c.created_at > since
        )
    ).one()
    if found[0] >= limit:
        wait = utc(found[1]) + _HOUR - now()
        raise RateLimited(
            f"{what} pushed {found[0]} versions within the hour (quota {limit})",
            max(1, math.ceil(wait.total_seconds())),
        )


def _stored(conn: Connection, where: Any) -> int:
    total = conn.execute(
        select(func.coalesce(func.sum(versions.c.archive_size), 0)).where(
            where, versions.c.deleted_at.is_(None)
        )
    ).scalar()
    return int(total or 0)


def check_push(
    conn: Connection, quotas: Quotas, model_id: int, model: str, actor: Actor, size: int
) -> None:
    """Refuse a new version of `size` bytes over the model's or the token's quotas; call it
    with the model's row locked."""
    of_model = versions.c.model_id == model_id
    _hourly(conn, of_model, quotas.versions_per_hour, f"model {model!r}")
    if _over(quotas.model_bytes, _stored(conn, of_model), size):
        raise RegistryFailure(
            "quota-exceeded", f"model {model!r} would store over {quotas.model_bytes} bytes"
        )
    if actor.token_id is None:
        return
    # a token's pushes to different models take different model locks: lock the token too
    conn.execute(select(api_tokens.c.id).where(api_tokens.c.id == actor.token_id).with_for_update())
    of_token = versions.c.created_token == actor.token_id
    _hourly(conn, of_token, quotas.token_versions_per_hour, f"token {actor.token_id}")
    if _over(quotas.token_bytes, _stored(conn, of_token), size):
        raise RegistryFailure(
            "quota-exceeded",
            f"token {actor.token_id} would store over {quotas.token_bytes} bytes of live versions",
        )


def check_tag(conn: Connection, quotas: Quotas, version_id: int, key: str, value: str) -> None:
    """Refuse a tag value over the size quota, or a new key past the tags-per-version quota."""
    size = len(value.encode("utf-8"))
    if _over(quotas.tag_value_bytes, 0, size):
        raise RegistryFailure(
            "quota-exceeded", f"the tag value is {size} bytes (quota {quotas.tag_value_bytes})"
        )
    others = _count(conn, tags.c.version_id == version_id, tags.c.key != key)
    _under(quotas.tags_per_version, others, "the version has {} tags")


def check_alias(conn: Connection, quotas: Quotas, model_id: int, alias: str) -> None:
    """Refuse a new alias past the model's alias quota."""
    others = _count(conn, aliases.c.model_id == model_id, aliases.c.alias != alias)
    _under(quotas.aliases_per_model, others, "the model has {} aliases")


def _count(conn: Connection, *where: Any) -> int:
    return int(conn.execute(select(func.count()).where(*where)).scalar_one())


def _under(limit: int, others: int, what: str) -> None:
    """quota-exceeded if one more than `others` is over `limit`."""
    if _over(limit, others):
        raise RegistryFailure("quota-exceeded", f"{what.format(others)} (quota {limit})")
