"""A push's objects on their way into the store: the canonical document, the served archive's
skeleton and its distinct tensor payloads, staged locally, claimed, uploaded, then committed."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Connection

from app.registry import objects
from app.registry.blobs import BlobStore, Piece, Staged
from app.registry.db import Database
from app.registry.packing import Layout, cut, payload_spans
from app.settings import Limits

_T = TypeVar("_T")


@dataclass
class Parts:
    """The objects of one pushed archive, by digest, where their bytes are, and how they make
    the archive."""

    archive: str
    layout: Layout
    pieces: dict[str, Piece] = field(default_factory=dict)
    #: staged files to remove when the push ends (the pieces' bytes are in them)
    files: list[Path] = field(default_factory=list)
    #: the staged archive, when no piece is a span of it: removed while the objects are
    #: claimed (freeing a large file's pages takes a while)
    spent: Staged | None = None

    @property
    def sizes(self) -> dict[str, int]:
        """Each object's size."""
        return {digest: piece.size for digest, piece in self.pieces.items()}

    def discard(self) -> None:
        """Remove every staged file still here."""
        for path in self.files:
            path.unlink(missing_ok=True)


def stage_parts(blobs: BlobStore, archive: Staged, canonical: Staged, limits: Limits) -> Parts:
    """Cut the finished staged archive into its objects, each readied for its upload (the
    archive is `spent` unless the pieces are spans of it, as an object store uploads them)."""
    spans = payload_spans(archive.path, limits)
    skeleton = blobs.stage()
    into = [blobs.staging.fresh() for _ in spans]
    files = [archive.path, canonical.path, skeleton.path, *into]
    # the payloads are readied by other threads (a local store copies, hashes and fsyncs each;
    # an object store leaves them in place, so this thread hashes them) while this one writes
    # the skeleton: the disk writes while the CPU hashes
    carving = [
        blobs.workers.submit(blobs.objects.carve, archive.path, offset, size, path)
        for (offset, size), path in zip(spans, into, strict=True)
    ]
    try:
        layout = cut(archive.path, spans, skeleton, lambda i: carving[i].result().digest)
        carved = [future.result() for future in carving]
    except BaseException:
        for future in carving:
            future.cancel()
        wait(carving)
        skeleton.discard()
        for path in files[1:]:
            path.unlink(missing_ok=True)
        raise
    parts = Parts(archive.finish(), layout, files=files)
    for hole, piece in zip(layout.holes, carved, strict=True):
        if parts.pieces.setdefault(hole.digest, piece) is not piece and piece.path != archive.path:
            piece.path.unlink()  # a copy of a payload the archive holds twice
    for extra in (skeleton, canonical):
        parts.pieces.setdefault(extra.digest, Piece(extra.path, 0, extra.size))
    if all(piece.path != archive.path for piece in parts.pieces.values()):
        parts.spent = archive
    return parts


def _each(blobs: BlobStore, action: Callable[[_T], None], items: list[_T]) -> None:
    """Run `action` on every item on the blob workers; all are done before an error is raised
    (none is left reading a staged file the failed push then removes)."""
    futures = [blobs.workers.submit(action, item) for item in items]
    wait(futures)
    for future in futures:
        future.result()


def upload(db: Database, blobs: BlobStore, parts: Parts) -> None:
    """Claim the objects and store those not stored yet, outside any lock; the spent archive
    is removed meanwhile."""
    dropping = None if parts.spent is None else blobs.workers.submit(parts.spent.discard)
    try:
        with db.write(blobs="shared") as conn:
            stored = objects.claim(conn, parts.sizes)
        _store(blobs, parts, stored)
    finally:
        if dropping is not None:
            dropping.result()


def _store(blobs: BlobStore, parts: Parts, stored: set[str]) -> None:
    """Store the objects not recorded as stored or not in the store."""

    def store(item: tuple[str, Piece]) -> None:
        digest, piece = item
        if digest not in stored or not blobs.exists(digest):
            blobs.objects.put(piece, digest)

    # several at once: an object store's requests wait on the network, a directory's fsyncs on
    # the disk, not on this CPU
    _each(blobs, store, sorted(parts.pieces.items()))


def commit(conn: Connection, blobs: BlobStore, parts: Parts) -> None:
    """In the version's transaction (blob lock shared): store again what gc took since the
    claim, record every object present and the archive's layout."""
    have = objects.present(conn, parts.pieces)

    def restore(digest: str) -> None:
        # gc is held off until the commit: what is in the store now stays there
        if not blobs.exists(digest):
            blobs.objects.put(parts.pieces[digest], digest)

    # several at once: the transaction (on SQLite, every writer's) waits on these requests
    _each(blobs, restore, sorted(set(parts.pieces) - have))
    objects.mark_present(conn, parts.sizes)
    objects.record_archive(conn, parts.archive, parts.layout)
