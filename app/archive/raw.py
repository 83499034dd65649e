"""A tensor as an archive stores it: its meta and the raw bytes of its storage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from schema import TensorMeta

TensorKind = Literal["parameter", "buffer", "constant"]


@dataclass(frozen=True)
class RawTensor:
    """One weight or constant: fully qualified name, kind, meta and little-endian storage bytes."""

    name: str
    kind: TensorKind
    meta: TensorMeta
    data: bytes
