"""Stored-tensor arithmetic without torch: dtype sizes and names, and storage bounds."""

from __future__ import annotations

from app.archive.errors import ArchiveFailure
from schema import ScalarType, SymIntAsInt, TensorMeta
from schema.dtypes import DTYPE_NAMES, ITEMSIZE
from schema.models import Layout, SymInt

_INT64_MAX = 2**63 - 1


def dtype_name(dtype: ScalarType) -> str:
    """torch's name of a dtype ("float32"); "unknown" for ScalarType.UNKNOWN."""
    return DTYPE_NAMES.get(dtype, "unknown")


def concrete(meta: TensorMeta, where: str) -> tuple[list[int], list[int], int]:
    """A stored tensor's sizes, strides and storage offset as ints (archive-bad-tensor-meta)."""
    values = [*meta.sizes, *meta.strides, meta.storage_offset]
    ints = [v.as_int for v in values if type(v) is SymIntAsInt and 0 <= v.as_int <= _INT64_MAX]
    if len(ints) < len(values):
        _refuse_first(meta, where)
    if len(meta.sizes) != len(meta.strides):
        raise ArchiveFailure(
            "archive-bad-tensor-meta",
            f"{where}: {len(meta.sizes)} sizes but {len(meta.strides)} strides",
        )
    rank = len(meta.sizes)
    return ints[:rank], ints[rank:-1], ints[-1]


def _refuse_first(meta: TensorMeta, where: str) -> None:
    """Raise for the first size, stride or offset that is not a plain int64."""
    for i, size in enumerate(meta.sizes):
        _int(size, f"{where}: size {i}")
    for i, stride in enumerate(meta.strides):
        _int(stride, f"{where}: stride {i}")
    _int(meta.storage_offset, f"{where}: storage offset")


def _int(value: SymInt, where: str) -> None:
    if not isinstance(value, SymIntAsInt):
        raise ArchiveFailure(
            "archive-bad-tensor-meta", f"{where} is symbolic; a stored tensor needs integers"
        )
    if value.as_int < 0:
        raise ArchiveFailure("archive-bad-tensor-meta", f"{where} is negative ({value.as_int})")
    if value.as_int > _INT64_MAX:
        raise ArchiveFailure("archive-bad-tensor-meta", f"{where} does not fit in int64")


def storage_nbytes(sizes: list[int], strides: list[int], offset: int, itemsize: int) -> int:
    """Bytes of storage a strided view needs: (max (size-1)*stride + offset + 1) * itemsize."""
    if any(size == 0 for size in sizes):
        return 0
    last = offset + sum((size - 1) * stride for size, stride in zip(sizes, strides, strict=True))
    return (last + 1) * itemsize


def check_storage(meta: TensorMeta, nbytes: int, where: str) -> None:
    """Refuse a meta that does not fit `nbytes` of storage, before any byte is read."""
    itemsize = ITEMSIZE.get(meta.dtype)
    if itemsize is None:
        raise ArchiveFailure(
            "archive-bad-tensor-meta", f"{where}: dtype {int(meta.dtype)} cannot be stored raw"
        )
    if meta.layout != Layout.Strided:
        raise ArchiveFailure(
            "archive-bad-tensor-meta",
            f"{where}: layout {meta.layout.name} cannot be stored raw (only Strided)",
        )
    sizes, strides, offset = concrete(meta, where)
    needed = storage_nbytes(sizes, strides, offset, itemsize)
    if nbytes % itemsize:
        raise ArchiveFailure(
            "archive-tensor-size-mismatch",
            f"{where}: {nbytes} bytes is not a whole number of {dtype_name(meta.dtype)} "
            f"elements ({itemsize} bytes each)",
        )
    if needed > nbytes:
        raise ArchiveFailure(
            "archive-tensor-size-mismatch",
            f"{where}: sizes {sizes}, strides {strides} and offset {offset} need {needed} "
            f"bytes of {dtype_name(meta.dtype)} storage; the member has {nbytes}",
        )
