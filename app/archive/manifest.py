"""The weights manifest: every stored tensor with its layout and the sha256 of its member."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict

from app.archive.pt2 import Archive
from app.archive.raw import TensorKind
from app.archive.tensors import concrete, dtype_name


class ManifestEntry(BaseModel):
    """One tensor of an archive; layout fields are None when a pickled tensor has no meta."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    kind: TensorKind
    dtype: str | None
    shape: list[int] | None
    strides: list[int] | None
    storage_offset: int | None
    #: bytes of the member holding the tensor (its whole storage, or its pickle).
    nbytes: int
    #: sha256 of the member's bytes, streamed.
    sha256: str
    pickled: bool


def manifest(archive: Archive) -> list[ManifestEntry]:
    """The manifest of every tensor in config order; each member is hashed once, streamed."""
    digests: dict[str, str] = {}
    pickled = set(archive.pickled)
    entries: list[ManifestEntry] = []
    for entry in archive.tensors.values():
        if entry.member not in digests:
            digest = hashlib.sha256()
            for block in archive.reader.iter_member(entry.member):
                digest.update(block)
            digests[entry.member] = digest.hexdigest()
        shape = strides = offset = None
        if entry.meta is not None:
            shape, strides, offset = concrete(entry.meta, f"tensor {entry.name!r}")
        entries.append(
            ManifestEntry(
                name=entry.name,
                kind=entry.kind,
                dtype=None if entry.meta is None else dtype_name(entry.meta.dtype),
                shape=shape,
                strides=strides,
                storage_offset=offset,
                nbytes=entry.size,
                sha256=digests[entry.member],
                pickled=entry.use_pickle or entry.member in pickled,
            )
        )
    return entries
