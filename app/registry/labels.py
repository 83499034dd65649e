"""What aliases and tags hold before a change (for the audit row), and who may move an alias."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from app.registry.db import aliases, tags, versions
from app.registry.errors import RegistryFailure


def alias(conn: Connection, model_id: int, name: str) -> dict[str, Any] | None:
    """An alias's version and protection mark, None if the model has no such alias."""
    row = conn.execute(
        select(versions.c.version, aliases.c.protected)
        .join(versions, versions.c.id == aliases.c.version_id)
        .where(aliases.c.model_id == model_id, aliases.c.alias == name)
    ).first()
    return None if row is None else {"version": row.version, "protected": bool(row.protected)}


def guard(
    model: str, name: str, before: dict[str, Any] | None, manage: bool, marking: bool
) -> None:
    """alias-protected unless the caller has `manage` or neither the alias is protected nor the
    change sets its mark."""
    if manage:
        return
    if marking:
        raise RegistryFailure("alias-protected", "marking an alias protected or not needs manage")
    if before is not None and before["protected"]:
        raise RegistryFailure(
            "alias-protected", f"{model}'s alias {name!r} is protected: moving it needs manage"
        )


def version_aliases(conn: Connection, version_id: int) -> dict[str, bool]:
    """The aliases naming a version, with their protection marks."""
    rows = conn.execute(
        select(aliases.c.alias, aliases.c.protected)
        .where(aliases.c.version_id == version_id)
        .order_by(aliases.c.alias)
    )
    return {r.alias: bool(r.protected) for r in rows}


def tag(conn: Connection, version_id: int, key: str) -> dict[str, Any] | None:
    """A tag's value, None if the version has no such tag."""
    value = conn.execute(
        select(tags.c.value).where(tags.c.version_id == version_id, tags.c.key == key)
    ).scalar()
    return None if value is None else {"value": value}
