"""Garbage collection of blob objects no kept version refers to, safe against concurrent pushes.

Kept versions are the live ones and those soft-deleted less than `gc_deleted_grace_s` ago. An
object is collected when no kept version refers to it (as its canonical document, its archive
stored whole before issue 16, or a part of its archive) and no push touched it within
`gc_claim_grace_s`. All of it runs in one transaction holding the blob lock exclusively (on
SQLite, every write transaction excludes every other): a push's final transaction, which holds
the lock shared, re-stores whatever was taken between its claim and its commit, so gc and pushes
can race freely (see `objects`). Objects the store holds with no row at all (a push that died
between its claim's rollback and its upload) are collected once they are older than the grace.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from pydantic import BaseModel
from sqlalchemy import Connection, delete, or_, select

from app.registry.blobs import BlobStore
from app.registry.db import Database, now, versions
from app.registry.objects import archive_objects, blob_archives, blob_objects, touched_before
from app.settings import Settings

_log = logging.getLogger(__name__)


class GcReport(BaseModel):
    """What a gc run collected (or, with dry_run, would collect)."""

    dry_run: bool
    #: objects removed: digests no kept version refers to
    objects: list[str]
    #: bytes those objects held
    freed_bytes: int
    #: stored archive layouts no kept version uses any more
    archives: list[str]
    #: names under the store's area that are not objects
    strays: list[str]


def _kept(conn: Connection, settings: Settings) -> set[str]:
    """Every object a kept version refers to."""
    cutoff = now() - timedelta(seconds=settings.gc_deleted_grace_s)
    kept = or_(versions.c.deleted_at.is_(None), versions.c.deleted_at >= cutoff)
    found: set[str] = set()
    for column in (versions.c.archive_digest, versions.c.graph_digest):
        found.update(conn.execute(select(column).where(kept).distinct()).scalars())
    found.update(
        conn.execute(
            select(archive_objects.c.object_digest)
            .join(versions, versions.c.archive_digest == archive_objects.c.archive_digest)
            .where(kept)
            .distinct()
        ).scalars()
    )
    return found


def _dead_archives(conn: Connection, kept: set[str]) -> list[str]:
    return sorted(set(conn.execute(select(blob_archives.c.digest)).scalars()) - kept)


def collect(db: Database, blobs: BlobStore, settings: Settings, dry_run: bool = False) -> GcReport:
    """Remove (or with `dry_run`, list) what no kept version needs."""
    with db.write(blobs="exclusive") as conn:
        kept = _kept(conn, settings)
        archives = _dead_archives(conn, kept)
        stamp = now() - timedelta(seconds=settings.gc_claim_grace_s)
        doomed = set(touched_before(conn, stamp)) - kept
        rows = set(conn.execute(select(blob_objects.c.digest)).scalars())
        sizes: dict[str, int] = {}
        for listed in blobs.listing():
            if listed.digest in doomed or (
                listed.digest not in rows
                and listed.digest not in kept
                and listed.written < stamp.timestamp()
            ):
                sizes[listed.digest] = listed.size
        strays = blobs.objects.strays()
        if not dry_run:
            for digest in sorted(doomed | set(sizes)):
                blobs.remove(digest)
            for chunk in _chunks(sorted(doomed)):
                conn.execute(delete(blob_objects).where(blob_objects.c.digest.in_(chunk)))
            for chunk in _chunks(archives):
                conn.execute(
                    delete(archive_objects).where(archive_objects.c.archive_digest.in_(chunk))
                )
                conn.execute(delete(blob_archives).where(blob_archives.c.digest.in_(chunk)))
            for name in strays:
                blobs.objects.remove_stray(name)
    return GcReport(
        dry_run=dry_run,
        objects=sorted(set(sizes) | doomed),
        freed_bytes=sum(sizes.values()),
        archives=archives,
        strays=strays,
    )


def _chunks(items: list[str], size: int = 500) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Periodic:
    """A daemon thread running gc every `gc_interval_s` seconds until stopped."""

    def __init__(self, db: Database, blobs: BlobStore, settings: Settings) -> None:
        self._stop = threading.Event()
        self._args = (db, blobs, settings)
        self._thread = threading.Thread(target=self._run, name="registry-gc", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        db, blobs, settings = self._args
        while not self._stop.wait(settings.gc_interval_s):
            try:
                collect(db, blobs, settings)
            except Exception:
                # the next interval tries again; the store or database may be back by then
                _log.exception("registry gc failed")

    def stop(self) -> None:
        """Stop the thread (after the run in progress, if any)."""
        self._stop.set()
        self._thread.join()
