"""A model's stored tensors read by numpy, without torch: their views (dtype, shape, strides,
offset; pickled ones listed, never read), the sources that hold them, and each tensor's value
statistics (min, max, mean, standard deviation, zeros, NaN and infinity counts) for the UI's
weights view. A program diff compares two such sources (`app.programs.diff.weights`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from app.archive import Archive, RawTensor, TensorKind, dtype_name
from app.archive.tensors import storage_nbytes
from schema.dtypes import ITEMSIZE
from schema.models import Layout, ScalarType, SymIntAsInt, TensorMeta

#: Elements converted to float64 at a time, so a large tensor never doubles in memory at once.
CHUNK = 1 << 20

#: Little-endian numpy dtypes of the scalar types numpy reads directly.
_NUMPY: dict[ScalarType, str] = {
    ScalarType.BYTE: "<u1",
    ScalarType.CHAR: "<i1",
    ScalarType.SHORT: "<i2",
    ScalarType.INT: "<i4",
    ScalarType.LONG: "<i8",
    ScalarType.HALF: "<f2",
    ScalarType.FLOAT: "<f4",
    ScalarType.DOUBLE: "<f8",
    ScalarType.COMPLEXFLOAT: "<c8",
    ScalarType.COMPLEXDOUBLE: "<c16",
    ScalarType.BOOL: "<u1",
    ScalarType.BFLOAT16: "<u2",
    ScalarType.UINT16: "<u2",
    ScalarType.UINT32: "<u4",
    ScalarType.UINT64: "<u8",
}
_COMPLEX = {ScalarType.COMPLEXFLOAT, ScalarType.COMPLEXDOUBLE}


@dataclass(frozen=True)
class StoredTensor:
    """A stored tensor's view: kind, dtype, shape, strides and offset; pickled ones unreadable."""

    name: str
    kind: TensorKind
    dtype: ScalarType | None
    shape: tuple[int, ...] | None
    strides: tuple[int, ...] | None
    offset: int
    readable: bool


class WeightSource(Protocol):
    """The stored tensors of one model, by the names its document uses."""

    def tensors(self) -> Mapping[str, StoredTensor]:
        """Every stored tensor of the model."""
        ...

    def chunks(self, name: str) -> Iterator[bytes]:
        """The storage bytes of a readable tensor, streamed."""
        ...

    def data(self, name: str) -> bytes:
        """The storage bytes of a readable tensor, whole."""
        ...


def stored_view(
    name: str, kind: TensorKind, meta: TensorMeta | None, readable: bool
) -> StoredTensor:
    """The tensor's view; unreadable unless it is a concrete, sane, strided view."""
    if meta is None:
        return StoredTensor(name, kind, None, None, None, 0, False)
    sizes = [s.as_int if isinstance(s, SymIntAsInt) else None for s in meta.sizes]
    strides = [s.as_int if isinstance(s, SymIntAsInt) else None for s in meta.strides]
    offset = meta.storage_offset.as_int if isinstance(meta.storage_offset, SymIntAsInt) else None
    shape = None if None in sizes else tuple(i for i in sizes if i is not None)
    steps = None if None in strides else tuple(i for i in strides if i is not None)
    sane = (
        shape is not None
        and steps is not None
        and offset is not None
        and len(shape) == len(steps)
        and min((*shape, *steps, offset)) >= 0
        and meta.dtype in ITEMSIZE
        and meta.layout == Layout.Strided
    )
    return StoredTensor(name, kind, meta.dtype, shape, steps, offset or 0, readable and sane)


class ArchiveWeights:
    """One model's tensors in an opened archive (pickled ones are listed, never read)."""

    def __init__(self, archive: Archive, model: str) -> None:
        self.archive = archive
        prefix = f"{model}/" if len(archive.documents) > 1 else ""
        self._full = {
            name.removeprefix(prefix): name
            for name, entry in archive.tensors.items()
            if entry.model == model
        }
        entries = archive.tensors
        self._tensors = {
            fqn: stored_view(
                fqn, entries[full].kind, entries[full].meta, not entries[full].use_pickle
            )
            for fqn, full in self._full.items()
        }

    def tensors(self) -> Mapping[str, StoredTensor]:
        """Every tensor of the model, by its document name."""
        return self._tensors

    def chunks(self, name: str) -> Iterator[bytes]:
        """Stream the storage bytes (the reader checks size and CRC at the end)."""
        return self.archive.iter_tensor(self._full[name])

    def data(self, name: str) -> bytes:
        """The whole storage bytes."""
        return self.archive.tensor(self._full[name]).data


class RawWeights:
    """Tensors already in memory (e.g. from safetensors), by name."""

    def __init__(self, tensors: Iterable[RawTensor]) -> None:
        self._raw = {t.name: t for t in tensors}
        self._tensors = {
            t.name: stored_view(t.name, t.kind, t.meta, True) for t in self._raw.values()
        }

    def tensors(self) -> Mapping[str, StoredTensor]:
        """Every tensor, by name."""
        return self._tensors

    def chunks(self, name: str) -> Iterator[bytes]:
        """The storage bytes as one chunk."""
        yield self._raw[name].data

    def data(self, name: str) -> bytes:
        """The storage bytes."""
        return self._raw[name].data


def numpy_readable(dtype: ScalarType) -> bool:
    """Whether value statistics can be computed for `dtype`."""
    return dtype in _NUMPY


def elements(stored: StoredTensor, data: bytes) -> npt.NDArray[Any] | str:
    """The view's elements, flattened, in their stored dtype; a reason when unreadable."""
    assert stored.dtype is not None
    assert stored.shape is not None
    assert stored.strides is not None
    itemsize = ITEMSIZE[stored.dtype]
    needed = storage_nbytes(list(stored.shape), list(stored.strides), stored.offset, itemsize)
    if needed > len(data):
        return f"{stored.name}: the view needs {needed} bytes, the storage has {len(data)}"
    base = np.frombuffer(data, dtype=_NUMPY[stored.dtype], count=len(data) // itemsize)
    view = np.lib.stride_tricks.as_strided(
        base[stored.offset :] if needed else base[:0],
        shape=stored.shape,
        strides=tuple(s * itemsize for s in stored.strides),
        writeable=False,
    )
    return view.reshape(-1)


def as_numbers(chunk: npt.NDArray[Any], dtype: ScalarType) -> npt.NDArray[Any]:
    """A chunk of `elements` as float64 (complex128 for complex dtypes)."""
    if dtype == ScalarType.BFLOAT16:
        # bfloat16 is the top half of a float32: widen the bits and reinterpret.
        return (chunk.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype in _COMPLEX:
        return chunk.astype(np.complex128)
    return chunk.astype(np.float64)


class TensorValues(BaseModel):
    """A stored tensor's values at a glance, computed in float64 (a complex tensor's over its
    magnitudes); min, max, mean and std over its finite elements, std with Bessel's correction as
    `torch.std` gives it (None when there are too few, or the tensor cannot be read: then
    `note` says why)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: TensorKind
    dtype: str | None
    shape: list[int] | None
    numel: int
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    zeros: int = 0
    nans: int = 0
    infs: int = 0
    note: str | None = None


def tensor_values(source: WeightSource) -> list[TensorValues]:
    """The value statistics of every tensor the source holds, in name order."""
    tensors = source.tensors()
    return [_values(source, tensors[name]) for name in sorted(tensors)]


def _values(source: WeightSource, stored: StoredTensor) -> TensorValues:
    numel = 0 if stored.shape is None else int(np.prod(stored.shape, dtype=np.int64))
    found = TensorValues(
        name=stored.name,
        kind=stored.kind,
        dtype=None if stored.dtype is None else dtype_name(stored.dtype),
        shape=None if stored.shape is None else list(stored.shape),
        numel=numel,
    )
    if not stored.readable or stored.dtype is None:
        found.note = "stored as a pickle or with a symbolic view: not read"
        return found
    if not numpy_readable(stored.dtype):
        found.note = f"numpy cannot read {dtype_name(stored.dtype)}"
        return found
    every = elements(stored, source.data(stored.name))
    if isinstance(every, str):
        found.note = every
        return found
    count = 0
    squares = 0.0
    low, high = np.inf, -np.inf
    # Sums of x and x² per chunk about the chunk's own mean, merged (Chan et al.): one pass,
    # no float64 copy of the whole tensor, and no cancellation on large offsets.
    mean = 0.0
    for start in range(0, numel, CHUNK):
        chunk = as_numbers(every[start : start + CHUNK], stored.dtype)
        if np.iscomplexobj(chunk):
            chunk = np.abs(chunk)
        nans = np.isnan(chunk)
        infs = np.isinf(chunk)
        found.nans += int(np.count_nonzero(nans))
        found.infs += int(np.count_nonzero(infs))
        found.zeros += int(np.count_nonzero(chunk == 0))
        finite = chunk[~(nans | infs)]
        if not finite.size:
            continue
        low = min(low, float(finite.min()))
        high = max(high, float(finite.max()))
        n = int(finite.size)
        chunk_mean = float(finite.mean())
        chunk_squares = float(np.sum((finite - chunk_mean) ** 2))
        delta = chunk_mean - mean
        together = count + n
        mean += delta * n / together
        squares += chunk_squares + delta * delta * count * n / together
        count = together
    if count:
        found.min, found.max, found.mean = low, high, mean
        found.std = float(np.sqrt(squares / (count - 1))) if count > 1 else None
    return found
