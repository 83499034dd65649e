"""A push's objects on their way into the store: the canonical document, the served archive's
skeleton and its distinct tensor payloads, staged locally, claimed, uploaded, then committed."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection

from app.registry import objects
from app.registry.blobs import BlobStore, Piece, Staged
from app.registry.blobs.base import open_window
from app.registry.db import Database
from app.registry.encoding import CHUNK, encode, open_stored
from app.registry.errors import RegistryFailure
from app.registry.packing import Layout, Payload, Tensor, cut, payloads
from app.settings import Limits

_T = TypeVar("_T")


@dataclass(frozen=True)
class Coding:
    """How a push stores its tensor payloads: framed where that saves at least `min_saving` of
    their bytes, as deltas against `bases` (by tensor name) while a chain stays under `chain`
    objects, compressed at zstd `level`; `known` tells which objects are stored already (those
    are not encoded again)."""

    min_saving: float
    chain: int
    level: int
    bases: dict[str, objects.Base]
    known: Callable[[list[str]], set[str]]


@dataclass
class Parts:
    """The objects of one pushed archive, by digest, where their bytes are (as they are to be
    stored), how each is stored, and how they make the archive."""

    archive: str
    layout: Layout
    tensors: list[Tensor | None]
    pieces: dict[str, Piece] = field(default_factory=dict)
    forms: dict[str, objects.Form] = field(default_factory=dict)
    #: staged files to remove when the push ends (the pieces' bytes are in them)
    files: list[Path] = field(default_factory=list)
    #: the staged archive, when no piece is a span of it: removed while the objects are
    #: claimed (freeing a large file's pages takes a while)
    spent: Staged | None = None

    def discard(self) -> None:
        """Remove every staged file still here."""
        for path in self.files:
            path.unlink(missing_ok=True)


def stage_parts(
    blobs: BlobStore,
    archive: Staged,
    canonical: Staged,
    limits: Limits,
    coding: Coding | None = None,
) -> Parts:
    """Cut the finished staged archive into its objects, each readied for its upload (the
    archive is `spent` unless the pieces are spans of it, as an object store uploads them);
    with `coding`, tensor payloads not stored yet are encoded."""
    found = payloads(archive.path, limits)
    encodable = [coding is not None and p.tensor is not None for p in found]
    skeleton = blobs.stage()
    into = [blobs.staging.fresh() for _ in found]
    files = [archive.path, canonical.path, skeleton.path, *into]
    # the payloads are readied by other threads (a local store copies, hashes and fsyncs each;
    # an object store leaves them in place, so this thread hashes them; a payload to encode is
    # hashed first, to encode only what is not stored yet) while this one writes the skeleton:
    # the disk writes while the CPU hashes
    readying = [
        blobs.workers.submit(_hashed, archive.path, p)
        if encode
        else blobs.workers.submit(blobs.objects.carve, archive.path, p.offset, p.size, path)
        for p, path, encode in zip(found, into, encodable, strict=True)
    ]
    encoding: list[Future[tuple[str, tuple[Piece, objects.Form]]]] = []
    try:
        spans = [(p.offset, p.size) for p in found]
        layout = cut(archive.path, spans, skeleton, lambda i: readying[i].result().digest)
        ready = [future.result() for future in readying]
        if coding is not None:
            wanted = zip(layout.holes, encodable, strict=True)
            known = coding.known([hole.digest for hole, encode in wanted if encode])
            encoding = [
                blobs.workers.submit(_encoded, blobs, coding, p, piece, path, hole.digest)
                for p, piece, path, hole in zip(found, ready, into, layout.holes, strict=True)
                if p.tensor is not None and hole.digest not in known
            ]
        encoded = dict(future.result() for future in encoding)
    except BaseException:
        pending: list[Future[Any]] = [*readying, *encoding]
        for future in pending:
            future.cancel()
        wait(pending)
        skeleton.discard()
        for path in files[1:]:
            path.unlink(missing_ok=True)
        raise
    parts = Parts(archive.finish(), layout, [p.tensor for p in found], files=files)
    for hole, piece in zip(layout.holes, ready, strict=True):
        piece, form = encoded.get(hole.digest, (piece, objects.Form.raw(hole.size)))
        if parts.pieces.setdefault(hole.digest, piece) is not piece and piece.path != archive.path:
            piece.path.unlink()  # a copy of a payload the archive holds twice
        parts.forms.setdefault(hole.digest, form)
    for extra in (skeleton, canonical):
        parts.pieces.setdefault(extra.digest, Piece(extra.path, 0, extra.size))
        parts.forms.setdefault(extra.digest, objects.Form.raw(extra.size))
    if all(piece.path != archive.path for piece in parts.pieces.values()):
        parts.spent = archive
    return parts


def _hashed(archive: Path, payload: Payload) -> Piece:
    """The payload as a span of the archive, hashed."""
    piece = Piece(archive, payload.offset, payload.size)
    digest = hashlib.sha256()
    with open_window(piece) as window:
        while chunk := window.read(CHUNK):
            digest.update(chunk)
    return dataclasses.replace(piece, digest=digest.hexdigest())


def _encoded(
    blobs: BlobStore, coding: Coding, payload: Payload, span: Piece, into: Path, digest: str
) -> tuple[str, tuple[Piece, objects.Form]]:
    """The payload `digest` framed into the new file `into`, against its base where it has one,
    when that saves enough (a piece whose `digest` is the frame's); else its raw bytes readied
    as any payload's are."""
    tensor = payload.tensor
    assert tensor is not None
    base = coding.bases.get(tensor.name)
    if base is not None and (
        base.tensor != tensor
        or base.size != payload.size
        or base.digest == digest
        or base.depth + 2 > coding.chain
    ):
        base = None
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(open_window(span))
        target = stack.enter_context(into.open("xb"))
        reference = (
            None
            if base is None
            else stack.enter_context(open_stored(blobs.objects.open, base.digest, base.size))
        )
        done = encode(
            source,
            payload.size,
            tensor.width,
            target,
            reference,
            "" if base is None else base.digest,
            coding.level,
        )
    if done.stored > min(payload.size - 1, payload.size * (1 - coding.min_saving)):
        into.unlink()
        raw = blobs.objects.carve(span.path, span.offset, span.size, into)
        return digest, (dataclasses.replace(raw, digest=digest), objects.Form.raw(payload.size))
    with into.open("rb") as written:
        piece = Piece(
            into, 0, done.stored, digest=hashlib.file_digest(written, "sha256").hexdigest()
        )
    if base is not None and done.delta:
        form = objects.Form(payload.size, done.stored, "delta", base.digest, base.depth + 1)
    else:
        form = objects.Form(payload.size, done.stored, "planes")
    return digest, (piece, form)


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
            stored = objects.claim(conn, parts.forms)
        _store(blobs, parts, stored)
    finally:
        if dropping is not None:
            dropping.result()


def _store(blobs: BlobStore, parts: Parts, stored: set[str]) -> None:
    """Store the objects not recorded as stored or not in the store."""

    def store(item: tuple[str, Piece]) -> None:
        digest, piece = item
        if digest not in stored:
            # whatever is there (another push's form, or one a failed push left, whose base gc
            # may have taken) gives way to this push's
            blobs.objects.put(piece, digest, replace=True)
        elif not blobs.exists(digest):
            blobs.objects.put(piece, digest)

    # several at once: an object store's requests wait on the network, a directory's fsyncs on
    # the disk, not on this CPU
    _each(blobs, store, sorted(parts.pieces.items()))


def commit(conn: Connection, blobs: BlobStore, parts: Parts) -> None:
    """In the version's transaction (blob lock shared): store again what gc took since the
    claim, record every object present and the archive's layout. A delta's base gc took (its
    version deleted and collected while this push ran) cannot be stored again from here: the
    push fails, and pushed again, stores that tensor whole."""
    bases = {f.base for f in parts.forms.values() if f.base is not None}
    have = objects.present(conn, set(parts.pieces) | bases)
    if bases - have:
        raise RegistryFailure(
            "registry-unavailable",
            f"the base object {min(bases - have)} of a delta was collected during the push; "
            "push again",
        )

    def restore(digest: str) -> None:
        # gc is held off until the commit: what is in the store now stays there
        if not blobs.exists(digest):
            blobs.objects.put(parts.pieces[digest], digest)

    # several at once: the transaction (on SQLite, every writer's) waits on these requests
    _each(blobs, restore, sorted(set(parts.pieces) - have))
    objects.mark_present(conn, parts.forms)
    objects.record_archive(conn, parts.archive, parts.layout, parts.tensors)
