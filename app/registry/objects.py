"""The registry's record of blob objects and of how stored archives are made of them.

A push claims its objects (a row each, touched now) before it uploads the ones not stored yet
(a local store places each payload as soon as it is copied, before the claim: gc leaves an
object with no row alone for the claim grace, and the commit re-stores it from the push's own
copy anyway), and in the transaction that adds its version (holding the blob lock shared) it
stores again whatever gc took meanwhile and marks every one present. Gc holds the lock
exclusively while it deletes, so no version is ever committed over an object gc removed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    DateTime,
    Index,
    String,
    Table,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite

from app.registry.db import Database, metadata, now
from app.registry.packing import Layout

blob_objects = Table(
    "blob_objects",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("size", BigInteger, nullable=False),
    #: False while a push is storing it (or was, when it died)
    Column("present", Boolean, nullable=False),
    Column("touched_at", DateTime(timezone=True), nullable=False),
)

blob_archives = Table(
    "blob_archives",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("size", BigInteger, nullable=False),
    Column("skeleton", String(64), nullable=False),
    Column("holes", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

archive_objects = Table(
    "blob_archive_objects",
    metadata,
    Column("archive_digest", String(64), primary_key=True),
    Column("object_digest", String(64), primary_key=True),
    Index("ix_blob_archive_objects_object_digest", "object_digest"),
)


def _insert(conn: Connection) -> Any:
    return (postgresql if conn.dialect.name == "postgresql" else sqlite).insert


def claim(conn: Connection, sizes: dict[str, int]) -> set[str]:
    """Touch each object's row (adding it as not present); those already present."""
    _upsert(conn, sizes, present=False)
    return present(conn, sizes)


def _upsert(conn: Connection, sizes: dict[str, int], present: bool) -> None:
    """Add the objects' rows (`present` as given) or touch them (and mark them present if
    `present`): one statement for all, rows in digest order (concurrent pushes lock alike)."""
    if not sizes:
        return
    stamp = now()
    update: dict[str, Any] = {"touched_at": stamp, **({"present": True} if present else {})}
    conn.execute(
        _insert(conn)(blob_objects).on_conflict_do_update(index_elements=["digest"], set_=update),
        [
            {"digest": digest, "size": size, "present": present, "touched_at": stamp}
            for digest, size in sorted(sizes.items())
        ],
    )


def present(conn: Connection, digests: Iterable[str]) -> set[str]:
    """Which of `digests` are recorded as stored."""
    wanted = sorted(set(digests))
    found: set[str] = set()
    for start in range(0, len(wanted), 500):
        found.update(
            conn.execute(
                select(blob_objects.c.digest).where(
                    blob_objects.c.digest.in_(wanted[start : start + 500]), blob_objects.c.present
                )
            ).scalars()
        )
    return found


def mark_present(conn: Connection, sizes: dict[str, int]) -> None:
    """Record the objects as stored."""
    _upsert(conn, sizes, present=True)


def record_archive(conn: Connection, digest: str, layout: Layout) -> None:
    """Remember how the archive `digest` is made (once: the same bytes, the same layout)."""
    if conn.execute(select(blob_archives.c.digest).where(blob_archives.c.digest == digest)).first():
        return
    conn.execute(
        blob_archives.insert().values(
            digest=digest,
            size=layout.size,
            skeleton=layout.skeleton,
            holes=layout.to_json(),
            created_at=now(),
        )
    )
    conn.execute(
        archive_objects.insert(),
        [{"archive_digest": digest, "object_digest": d} for d in sorted(layout.objects())],
    )


def layout_of(conn: Connection, digest: str) -> Layout | None:
    """The layout of a stored archive (None for one stored whole, from before tensor-level
    storage)."""
    row = conn.execute(select(blob_archives).where(blob_archives.c.digest == digest)).first()
    return None if row is None else Layout.of(row.size, row.skeleton, row.holes)


class Layouts:
    """Layouts of stored archives, the most recently used remembered: an archive's bytes decide
    its layout, so one read of the database serves every later pull and Range request of it (an
    archive gc took since fails as before, when its skeleton is opened)."""

    def __init__(self, db: Database, size: int = 64) -> None:
        self._db = db
        self._size = size
        self._known: OrderedDict[str, Layout] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, digest: str) -> Layout | None:
        """The layout of the stored archive `digest` (None for one stored whole)."""
        with self._lock:
            layout = self._known.get(digest)
            if layout is not None:
                self._known.move_to_end(digest)
                return layout
        with self._db.read() as conn:
            layout = layout_of(conn, digest)
        if layout is not None:
            with self._lock:
                self._known[digest] = layout
                while len(self._known) > self._size:
                    self._known.popitem(last=False)
        return layout


def touched_before(conn: Connection, cutoff: datetime) -> dict[str, bool]:
    """Objects whose row was last touched before `cutoff`, with whether they are present."""
    return {
        r.digest: bool(r.present)
        for r in conn.execute(
            select(blob_objects.c.digest, blob_objects.c.present).where(
                blob_objects.c.touched_at < cutoff
            )
        )
    }
