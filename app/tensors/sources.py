"""Where a torch job finds a program's tensors: named by the service, read by the worker.

The service process never holds a program's tensors: it hands a worker the path of the upload
(a .pt2, or a safetensors part) and the names to take, and the worker reads them itself with
our own readers, under the same limits. Nothing here imports torch.

A worker maps an archive's stored tensors rather than reading them (`TensorSource.opened`):
torch builds on the mapped bytes without a copy, while a helper thread reads every member once
to check its CRC, or copies it into the output as the writer checks it.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from app.archive import Archive, RawTensor, open_archive
from app.archive.pt2 import TensorEntry
from app.archive.raw import Streamed, StreamedTensor
from app.archive.zipdir import STORED, ZipMember
from app.settings import Limits
from app.tensors.safetensors_io import from_safetensors, safetensors_names
from app.tensors.views import MappedTensor, Stored
from schema.dtypes import ITEMSIZE


@dataclass(frozen=True)
class TensorSource:
    """One model's tensors in a .pt2, the tensors of a safetensors file, or none at all.

    Paths (or, for a caller that already holds them, the file's bytes) and names only; nothing
    is read before `read()`.
    """

    #: a .pt2 archive.
    archive: Path | bytes | None = None
    #: the archive's tensors to take: name in the archive -> name the document uses.
    names: Mapping[str, str] = field(default_factory=dict)
    #: a safetensors file.
    safetensors: Path | bytes | None = None
    #: the limits the archive is opened with.
    limits: Limits = field(default_factory=Limits)
    #: the archive's sample-inputs member, proven `weights_only`-loadable: written as it is
    #: beside the program, since torch.export.load's module checks the program's guards only
    #: when the program has example inputs.
    sample_inputs: str | None = None

    def __post_init__(self) -> None:
        if self.archive is not None and self.safetensors is not None:
            raise ValueError("tensors come from an archive or a safetensors file, not both")

    def __len__(self) -> int:
        """How many tensors there are (a safetensors file's header is read for it)."""
        if self.safetensors is not None:
            return len(safetensors_names(self.safetensors))
        return len(self.names) if self.archive is not None else 0

    def read(self) -> dict[str, RawTensor]:
        """The tensors by the names the document uses; each storage is read (and its CRC
        checked) once, so tensors that share one keep sharing its bytes."""
        if self.safetensors is not None:
            data = self.safetensors
            return from_safetensors(data if isinstance(data, bytes) else data.read_bytes())
        if self.archive is None:
            return {}
        with open_archive(self.archive, self.limits) as archive:
            return _read(archive, self.names)

    def sample_input_bytes(self) -> bytes | None:
        """The sample-inputs member's verified bytes, or None when there is none to write."""
        if self.sample_inputs is None or self.archive is None:
            return None
        with open_archive(self.archive, self.limits) as archive:
            return archive.reader.read_member(self.sample_inputs, self.limits.max_json_bytes)

    @contextmanager
    def opened(self) -> Iterator[Opened]:
        """The tensors for torch to build on, mapped from an archive file where they can be."""
        if not isinstance(self.archive, Path):
            yield Opened(dict(self.read()))
            return
        with open_archive(self.archive, self.limits) as archive:
            yield Opened(_mapped(archive, self.archive, self.names), archive, self.names)


@dataclass
class Opened:
    """A source's tensors by the names the document uses, and the archive they are mapped
    from (None when they were read whole, their CRCs checked already)."""

    tensors: dict[str, Stored]
    archive: Archive | None = None
    #: name in the archive -> name the document uses
    names: Mapping[str, str] = field(default_factory=dict)

    def verify(self) -> None:
        """Read each mapped member once, checking its size and CRC (archive-crc-mismatch)."""
        if self.archive is None:
            return
        mapped = {n for n, t in self.tensors.items() if isinstance(t, MappedTensor)}
        members = {e.member for n, e in _entries(self.archive, self.names) if n in mapped}
        for member in members:
            for _ in self.archive.reader.iter_member(member):
                pass

    def streamed(
        self, splice: Callable[[ZipMember], Streamed | None] | None = None
    ) -> dict[str, RawTensor | StreamedTensor]:
        """The tensors as the writer copies them: those of an archive streamed from it (each
        member checked against its CRC as it passes), or as `splice` streams the members it
        takes; the others as read."""
        if self.archive is None:
            return {n: t for n, t in self.tensors.items() if isinstance(t, RawTensor)}
        streams: dict[str, Streamed] = {}
        out: dict[str, RawTensor | StreamedTensor] = {}
        for name, entry in _entries(self.archive, self.names):
            assert entry.meta is not None
            if entry.member not in streams:
                spliced = splice(self.archive.reader.member(entry.member)) if splice else None
                streams[entry.member] = spliced or self.archive.streamed(entry.member)
            out[name] = StreamedTensor(
                name, entry.kind, entry.meta, streams[entry.member], entry.use_pickle
            )
        return out


def _entries(archive: Archive, names: Mapping[str, str]) -> Iterator[tuple[str, TensorEntry]]:
    """The tensors of the archive to take, with the names the document uses; any other name is
    left for the weights check to report missing. A pickled payload is taken when its config
    gives its meta (torch builds on a stand-in of it; its bytes are carried, never unpickled):
    the service refuses a program with pickled members before any job unless the deployment
    carries opaque pickles."""
    for stored, name in names.items():
        entry = archive.tensors.get(stored)
        if entry is not None and entry.meta is not None:
            yield name, entry


def _read(archive: Archive, names: Mapping[str, str]) -> dict[str, RawTensor]:
    storages: dict[str, bytes] = {}
    tensors: dict[str, RawTensor] = {}
    for name, entry in _entries(archive, names):
        assert entry.meta is not None
        if entry.member not in storages:
            storages[entry.member] = archive.reader.read_member(entry.member, entry.size)
        tensors[name] = RawTensor(
            name, entry.kind, entry.meta, storages[entry.member], entry.use_pickle
        )
    return tensors


def _mapped(archive: Archive, path: Path, names: Mapping[str, str]) -> dict[str, Stored]:
    """Stored members aligned for their dtype as views of a private (copy-on-write) mapping of
    the file; any other (deflated, misaligned) read whole. CRCs are `Opened.verify`'s."""
    with path.open("rb") as file:
        view = memoryview(mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY))
    views: dict[str, memoryview] = {}
    read: dict[str, bytes] = {}
    tensors: dict[str, Stored] = {}
    for name, entry in _entries(archive, names):
        assert entry.meta is not None
        member = archive.reader.member(entry.member)
        end = member.data_offset + member.size
        aligned = member.data_offset % ITEMSIZE.get(entry.meta.dtype, 1) == 0
        if member.method == STORED and aligned and end <= len(view) and not entry.use_pickle:
            if entry.member not in views:
                views[entry.member] = view[member.data_offset : end]
            tensors[name] = MappedTensor(name, entry.kind, entry.meta, views[entry.member])
            continue
        if entry.member not in read:
            read[entry.member] = archive.reader.read_member(entry.member, entry.size)
        tensors[name] = RawTensor(
            name, entry.kind, entry.meta, read[entry.member], entry.use_pickle
        )
    return tensors
