"""Where a torch job finds a program's tensors: named by the service, read by the worker.

The service process never holds a program's tensors: it hands a worker the path of the upload
(a .pt2, or a safetensors part) and the names to take, and the worker reads them itself with
our own readers, under the same limits. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from app.archive import Archive, RawTensor, open_archive
from app.bridge.safetensors_io import from_safetensors, safetensors_names
from app.settings import Limits


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


def _read(archive: Archive, names: Mapping[str, str]) -> dict[str, RawTensor]:
    storages: dict[str, bytes] = {}
    tensors: dict[str, RawTensor] = {}
    for stored, name in names.items():
        entry = archive.tensors.get(stored)
        if entry is None or entry.use_pickle or entry.meta is None:
            continue  # not a raw tensor of this archive: the weights check reports it missing
        if entry.member not in storages:
            storages[entry.member] = archive.reader.read_member(entry.member, entry.size)
        tensors[name] = RawTensor(name, entry.kind, entry.meta, storages[entry.member])
    return tensors
