"""The registry's record of blob objects and of how stored archives are made of them.

An object is keyed by the sha256 of its raw bytes, whatever form it is stored in (`encoding`:
raw, or framed on its own or as a delta against a base object; any form a push stored under a
digest reads back as the same bytes). Each row records the form its storer chose (its stored
size, and for a delta the chain's depth: the most objects a read of it opens, less one) and
`blob_object_bases` every base any push may have stored it against: gc keeps the bases of every
object it keeps, and so on down the chain.

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
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    DateTime,
    Index,
    Integer,
    String,
    Table,
    case,
    func,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from app.registry.db import Database, metadata, now
from app.registry.packing import Layout, Tensor

blob_objects = Table(
    "blob_objects",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("size", BigInteger, nullable=False),
    #: False while a push is storing it (or was, when it died)
    Column("present", Boolean, nullable=False),
    Column("touched_at", DateTime(timezone=True), nullable=False),
    #: bytes the store holds for it (NULL: its size, as every object stored before encodings)
    Column("stored_size", BigInteger, nullable=True),
    #: NULL raw; "planes" framed on its own; "delta" framed against a base (encoding.py)
    Column("encoding", String(16), nullable=True),
    #: deltas between it and a full object (the largest of any form pushed for it)
    Column("depth", Integer, nullable=False, server_default="0"),
)

object_bases = Table(
    "blob_object_bases",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("base", String(64), primary_key=True),
    Index("ix_blob_object_bases_base", "base"),
)

blob_archives = Table(
    "blob_archives",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("size", BigInteger, nullable=False),
    Column("skeleton", String(64), nullable=False),
    Column("holes", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    #: per hole, the tensor it holds ([name, dtype, shape, width]) or null: a later version's
    #: tensors find their delta bases here (NULL for archives stored before)
    Column("tensors", JSON, nullable=True),
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


@dataclass(frozen=True)
class Form:
    """How a push stores one object: its raw size, the bytes it stores, its encoding, and for
    a delta, its base and its depth."""

    size: int
    stored: int
    encoding: str | None = None
    base: str | None = None
    depth: int = 0

    @classmethod
    def raw(cls, size: int) -> Form:
        """An object stored as its raw bytes."""
        return cls(size, size)


@dataclass(frozen=True)
class Base:
    """A stored tensor a new version's tensor of the same name, dtype and shape may be stored
    against: its object, its raw size and its depth."""

    digest: str
    tensor: Tensor
    size: int
    depth: int


def claim(conn: Connection, forms: dict[str, Form]) -> set[str]:
    """Touch each object's row (adding it as not present) and the rows of the bases its form
    needs, record those bases; the objects already present."""
    _upsert(conn, forms, present=False)
    bases = sorted({(d, f.base) for d, f in forms.items() if f.base is not None})
    if bases:
        conn.execute(
            _insert(conn)(object_bases).on_conflict_do_nothing(),
            [{"digest": d, "base": b} for d, b in bases],
        )
        # the bases stay out of gc's reach for its claim grace, as the objects do
        for chunk in chunks(sorted({b for _, b in bases})):
            conn.execute(
                update(blob_objects)
                .where(blob_objects.c.digest.in_(chunk))
                .values(touched_at=now())
            )
    return present(conn, forms)


def _upsert(conn: Connection, forms: dict[str, Form], present: bool) -> None:
    """Add the objects' rows (`present` as given) or touch them (and mark them present if
    `present`): one statement for all, rows in digest order (concurrent pushes lock alike). A
    row's form stays that of the push that stored it; its depth is the deepest claimed."""
    if not forms:
        return
    stamp = now()
    insert = _insert(conn)(blob_objects)
    deeper = (func.greatest if conn.dialect.name == "postgresql" else func.max)(
        blob_objects.c.depth, insert.excluded.depth
    )
    stored = blob_objects.c.present
    update_: dict[str, Any] = {
        "touched_at": stamp,
        "depth": deeper,
        "encoding": case((stored, blob_objects.c.encoding), else_=insert.excluded.encoding),
        "stored_size": case(
            (stored, blob_objects.c.stored_size), else_=insert.excluded.stored_size
        ),
        **({"present": True} if present else {}),
    }
    conn.execute(
        insert.on_conflict_do_update(index_elements=["digest"], set_=update_),
        [
            {
                "digest": digest,
                "size": form.size,
                "present": present,
                "touched_at": stamp,
                "stored_size": form.stored,
                "encoding": form.encoding,
                "depth": form.depth,
            }
            for digest, form in sorted(forms.items())
        ],
    )


def present(conn: Connection, digests: Iterable[str]) -> set[str]:
    """Which of `digests` are recorded as stored."""
    found: set[str] = set()
    for chunk in chunks(sorted(set(digests))):
        found.update(
            conn.execute(
                select(blob_objects.c.digest).where(
                    blob_objects.c.digest.in_(chunk), blob_objects.c.present
                )
            ).scalars()
        )
    return found


def mark_present(conn: Connection, forms: dict[str, Form]) -> None:
    """Record the objects as stored."""
    _upsert(conn, forms, present=True)


def record_archive(
    conn: Connection, digest: str, layout: Layout, tensors: list[Tensor | None]
) -> None:
    """Remember how the archive `digest` is made (once: the same bytes, the same layout), and
    the tensor each of its holes holds."""
    if conn.execute(select(blob_archives.c.digest).where(blob_archives.c.digest == digest)).first():
        return
    conn.execute(
        blob_archives.insert().values(
            digest=digest,
            size=layout.size,
            skeleton=layout.skeleton,
            holes=layout.to_json(),
            created_at=now(),
            tensors=[None if t is None else t.to_json() for t in tensors],
        )
    )
    conn.execute(
        archive_objects.insert(),
        [{"archive_digest": digest, "object_digest": d} for d in sorted(layout.objects())],
    )


def bases_in(conn: Connection, archive: str) -> dict[str, Base]:
    """The tensors of the stored archive `archive` that are present, by name, as bases."""
    row = conn.execute(
        select(blob_archives.c.holes, blob_archives.c.tensors).where(
            blob_archives.c.digest == archive
        )
    ).first()
    if row is None or row.tensors is None:
        return {}
    held = {
        str(digest): (Tensor.of(tensor), int(size))
        for (_, size, digest), tensor in zip(row.holes, row.tensors, strict=True)
        if tensor is not None
    }
    depths: dict[str, int] = {}
    for chunk in chunks(sorted(held)):
        depths.update(
            (row.digest, int(row.depth))
            for row in conn.execute(
                select(blob_objects.c.digest, blob_objects.c.depth).where(
                    blob_objects.c.digest.in_(chunk), blob_objects.c.present
                )
            )
        )
    return {
        tensor.name: Base(digest, tensor, size, depths[digest])
        for digest, (tensor, size) in held.items()
        if digest in depths
    }


def size_of(conn: Connection, digest: str) -> int | None:
    """The raw size of the object `digest` (None if it has no row)."""
    size = conn.execute(select(blob_objects.c.size).where(blob_objects.c.digest == digest)).scalar()
    return None if size is None else int(size)


def with_bases(conn: Connection, digests: set[str]) -> set[str]:
    """`digests` and every base they need, down each chain."""
    found = set(digests)
    todo = sorted(found)
    while todo:
        more: set[str] = set()
        for chunk in chunks(todo):
            more.update(
                conn.execute(
                    select(object_bases.c.base).where(object_bases.c.digest.in_(chunk))
                ).scalars()
            )
        todo = sorted(more - found)
        found |= more
    return found


class Usage(BaseModel):
    """What the store holds: its objects, their raw bytes and the bytes stored for them."""

    objects: int
    raw_bytes: int
    stored_bytes: int


def usage(conn: Connection) -> Usage:
    """The present objects' count, raw bytes and stored bytes (as their storers recorded)."""
    row = conn.execute(
        select(
            func.count(),
            func.coalesce(func.sum(blob_objects.c.size), 0),
            func.coalesce(
                func.sum(func.coalesce(blob_objects.c.stored_size, blob_objects.c.size)), 0
            ),
        ).where(blob_objects.c.present)
    ).one()
    return Usage(objects=int(row[0]), raw_bytes=int(row[1]), stored_bytes=int(row[2]))


def chunks(items: list[str], size: int = 500) -> list[list[str]]:
    """`items` in lists of at most `size` (an IN list's bound)."""
    return [items[i : i + size] for i in range(0, len(items), size)]


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
