"""A tensor as an archive stores it: its meta and the raw bytes of its storage."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from schema import TensorMeta

TensorKind = Literal["parameter", "buffer", "constant"]


@dataclass(frozen=True)
class RawTensor:
    """One weight or constant: fully qualified name, kind, meta and little-endian storage bytes
    (or, when `pickled`, the opaque bytes of a `use_pickle` payload, never unpickled here)."""

    name: str
    kind: TensorKind
    meta: TensorMeta
    data: bytes
    pickled: bool = False


@dataclass(frozen=True, eq=False)
class Streamed:
    """Bytes read only as they are written: a source member's declared size and CRC-32 (the
    writer's local header needs them first) and its chunks, which check both at their end."""

    size: int
    crc: int
    chunks: Callable[[], Iterator[bytes]]


@dataclass(frozen=True)
class StreamedTensor:
    """A tensor whose storage bytes (or pickled payload) are streamed from a source archive
    when written."""

    name: str
    kind: TensorKind
    meta: TensorMeta
    data: Streamed
    pickled: bool = False
