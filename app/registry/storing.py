"""A push's objects on their way into the store: the canonical document, the served archive's
skeleton and its distinct tensor payloads, staged locally, claimed, uploaded, then committed."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy import Connection

from app.registry import objects
from app.registry.blobs import BlobStore, Staged
from app.registry.db import Database
from app.registry.packing import Layout, split
from app.settings import Limits


@dataclass
class Parts:
    """The staged objects of one pushed archive, by digest, and how they make the archive."""

    archive: str
    layout: Layout
    staged: dict[str, Staged] = field(default_factory=dict)

    @property
    def sizes(self) -> dict[str, int]:
        """Each object's size."""
        return {digest: s.size for digest, s in self.staged.items()}

    def discard(self) -> None:
        """Remove every staged file still here."""
        for staged in self.staged.values():
            staged.discard()


def stage_parts(blobs: BlobStore, archive: Staged, canonical: Staged, limits: Limits) -> Parts:
    """Cut the finished staged archive into its objects (the archive itself is dropped), each
    settled for its upload."""
    skeleton = blobs.stage()
    settling: list[Future[None]] = []
    # each payload settles (a local store fsyncs it) while the next ones are cut: the disk
    # writes back what the CPU has hashed, instead of one file after another at the end
    with ThreadPoolExecutor(blobs.objects.parallel) as pool:

        def settle(staged: Staged) -> None:
            settling.append(pool.submit(blobs.objects.settle, staged.path))

        try:
            layout, payloads = split(archive.path, skeleton, blobs.stage, limits, settle)
        except BaseException:
            skeleton.discard()
            raise
        parts = Parts(archive.finish(), layout, dict(payloads))
        for extra in (skeleton, canonical):
            if extra.digest in parts.staged:
                extra.discard()
            else:
                parts.staged[extra.digest] = extra
                settle(extra)
        try:
            for future in settling:
                future.result()
        except BaseException:
            parts.discard()
            raise
    archive.discard()
    return parts


def upload(db: Database, blobs: BlobStore, parts: Parts) -> None:
    """Claim the objects and store those not stored yet, outside any lock."""
    with db.write(blobs="shared") as conn:
        stored = objects.claim(conn, parts.sizes)

    def store(item: tuple[str, Staged]) -> None:
        digest, staged = item
        if digest not in stored or not blobs.exists(digest):
            blobs.objects.put(staged.path, digest)

    # several at once: an object store's requests wait on the network, a directory's fsyncs on
    # the disk, not on this CPU
    with ThreadPoolExecutor(blobs.objects.parallel) as pool:
        list(pool.map(store, sorted(parts.staged.items())))


def commit(conn: Connection, blobs: BlobStore, parts: Parts) -> None:
    """In the version's transaction (blob lock shared): store again what gc took since the
    claim, record every object present and the archive's layout."""
    have = objects.present(conn, parts.staged)
    for digest in sorted(set(parts.staged) - have):
        # gc is held off until the commit: what is in the store now stays there
        if not blobs.exists(digest):
            blobs.objects.put(parts.staged[digest].path, digest)
    objects.mark_present(conn, parts.sizes)
    objects.record_archive(conn, parts.archive, parts.layout)
