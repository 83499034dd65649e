"""Garbage collection of blob objects no kept version refers to, safe against concurrent pushes.

Kept versions are the live ones and those soft-deleted less than `gc_deleted_grace_s` ago. An
object is collected when no kept version refers to it (as its canonical document, its archive
stored whole, as registries before tensor-level storage stored every archive, or a part of its
archive, or as the base of a delta another kept object is stored as, down each chain) and no
push touched it within `gc_claim_grace_s` (nor is it the base of one a push touched). All of it
runs in one transaction holding the blob lock exclusively (on SQLite, every write transaction
excludes every other): a
push's final transaction, which holds the lock shared, re-stores whatever was taken between its
claim and its commit, so gc and pushes can race freely (see `objects`). Objects the store holds
with no row at all (a push that died between its claim's rollback and its upload) are collected
once they are older than the grace, and so are an object store's unfinished multipart uploads (a
replica killed mid-upload). Answers the API kept about archives no kept version has (graphs,
views, diffs: app/registry/answers.py) are removed too.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from pydantic import BaseModel
from sqlalchemy import Connection, delete, or_, select

from app.registry.answers import dead_answers
from app.registry.blobs import BlobStore
from app.registry.db import Database, now, versions
from app.registry.objects import (
    archive_objects,
    blob_archives,
    blob_objects,
    chunks,
    object_bases,
    touched_before,
    with_bases,
)
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
    #: unfinished uploads begun before the claim grace ("<key> <upload id>"), aborted
    uploads: list[str]
    #: kept answers (graphs, views, diffs; by name: the archive digests they are computed
    #: from and the view) of archives no kept version has
    answers: list[str]


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
    # no database row tells of an upload: they are listed and aborted outside the lock
    begun = (now() - timedelta(seconds=settings.gc_claim_grace_s)).timestamp()
    uploads = [u for u in blobs.objects.unfinished() if u.started < begun]
    if not dry_run:
        for upload in uploads:
            blobs.objects.abort(upload)
    with db.write(blobs="exclusive") as conn:
        kept = _kept(conn, settings)
        archives = _dead_archives(conn, kept)
        stamp = now() - timedelta(seconds=settings.gc_claim_grace_s)
        old = set(touched_before(conn, stamp))
        recent = set(conn.execute(select(blob_objects.c.digest)).scalars()) - old
        # a delta reads its base: the bases of what stays (kept, or claimed by a push within
        # the grace) stay, down each chain
        kept = with_bases(conn, kept | recent)
        doomed = old - kept
        sizes = _unrecorded(conn, blobs, kept, doomed, stamp.timestamp())
        strays = blobs.objects.strays()
        answers = dead_answers(settings, kept)
        if not dry_run:
            _remove(conn, blobs, sorted(doomed | set(sizes)), sorted(doomed), archives)
            for name in strays:
                blobs.objects.remove_stray(name)
            for path in answers:
                path.unlink(missing_ok=True)
    return GcReport(
        dry_run=dry_run,
        objects=sorted(set(sizes) | doomed),
        freed_bytes=sum(sizes.values()),
        archives=archives,
        strays=strays,
        uploads=[f"{u.key} {u.upload_id}" for u in uploads],
        answers=[p.stem for p in answers],
    )


def _unrecorded(
    conn: Connection, blobs: BlobStore, kept: set[str], doomed: set[str], before: float
) -> dict[str, int]:
    """The stored objects to collect, with their sizes: the doomed ones, and those with no row
    at all (a push that died before its claim) written before `before`."""
    rows = set(conn.execute(select(blob_objects.c.digest)).scalars())
    return {
        listed.digest: listed.size
        for listed in blobs.listing()
        if listed.digest in doomed
        or (listed.digest not in rows and listed.digest not in kept and listed.written < before)
    }


def _remove(
    conn: Connection, blobs: BlobStore, gone: list[str], rows: list[str], archives: list[str]
) -> None:
    """Delete the objects `gone`, the object rows `rows` and the archive layouts `archives`."""
    for digest in gone:
        blobs.remove(digest)
    for chunk in chunks(rows):
        conn.execute(delete(blob_objects).where(blob_objects.c.digest.in_(chunk)))
        conn.execute(delete(object_bases).where(object_bases.c.digest.in_(chunk)))
    for chunk in chunks(archives):
        conn.execute(delete(archive_objects).where(archive_objects.c.archive_digest.in_(chunk)))
        conn.execute(delete(blob_archives).where(blob_archives.c.digest.in_(chunk)))


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
