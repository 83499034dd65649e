"""A stored archive as any process can open it: what a document worker needs to read a version
that the HTTP process has only looked up (its digest and, for one stored as parts, its layout),
so the reading and checking of a stored program runs where an upload's would."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

from app import operations as ops
from app.archive import open_archive
from app.registry.blobs import objects_for
from app.registry.blobs.base import Objects
from app.registry.packing import Layout, rebuilt
from app.settings import Settings


@dataclass(frozen=True)
class StoredArchive:
    """A live version's archive: its digest, and the layout it is rebuilt from (None for one
    stored whole)."""

    digest: str
    layout: Layout | None
    #: the bytes of its documents, as its zip directory declares them (what admission counts)
    document_bytes: int = 0

    def open(self, objects: Objects) -> BinaryIO:
        """The archive's bytes from `objects`; FileNotFoundError if gc took them."""
        if self.layout is not None:
            return rebuilt(self.layout, objects.open, objects.read_ahead)
        return objects.open(self.digest)


@contextmanager
def stored_source(stored: StoredArchive, settings: Settings) -> Iterator[ops.Source]:
    """The stored archive opened as an operations source, from the blob store `settings` name
    (in whichever process runs this)."""
    with stored.open(stored_objects(settings)) as handle:
        with open_archive(handle, settings.limits) as archive:
            yield ops.Source(dict(archive.documents), archive)


def stored_objects(settings: Settings) -> Objects:
    """The blob store `settings` name, opened in whichever process calls this."""
    return objects_for(settings.blob_url, settings.data_dir, settings.blob_part_mb << 20)
