"""Stored-tensor arithmetic without torch: dtype sizes and names, and storage bounds."""

from __future__ import annotations

from app.archive.errors import ArchiveFailure
from schema import ScalarType, SymIntAsInt, TensorMeta
from schema.models import Layout, SymInt

#: bytes per element of each dtype torch can store raw.
ITEMSIZE: dict[ScalarType, int] = {
    ScalarType.BYTE: 1,
    ScalarType.CHAR: 1,
    ScalarType.SHORT: 2,
    ScalarType.INT: 4,
    ScalarType.LONG: 8,
    ScalarType.HALF: 2,
    ScalarType.FLOAT: 4,
    ScalarType.DOUBLE: 8,
    ScalarType.COMPLEXHALF: 4,
    ScalarType.COMPLEXFLOAT: 8,
    ScalarType.COMPLEXDOUBLE: 16,
    ScalarType.BOOL: 1,
    ScalarType.BFLOAT16: 2,
    ScalarType.UINT16: 2,
    ScalarType.FLOAT8E4M3FN: 1,
    ScalarType.FLOAT8E5M2: 1,
    ScalarType.FLOAT8E4M3FNUZ: 1,
    ScalarType.FLOAT8E5M2FNUZ: 1,
    ScalarType.FLOAT8E8M0FNU: 1,
    ScalarType.UINT32: 4,
    ScalarType.UINT64: 8,
}

#: torch's dtype names (``str(torch.float32) == "torch.float32"``).
DTYPE_NAMES: dict[ScalarType, str] = {
    ScalarType.BYTE: "uint8",
    ScalarType.CHAR: "int8",
    ScalarType.SHORT: "int16",
    ScalarType.INT: "int32",
    ScalarType.LONG: "int64",
    ScalarType.HALF: "float16",
    ScalarType.FLOAT: "float32",
    ScalarType.DOUBLE: "float64",
    ScalarType.COMPLEXHALF: "complex32",
    ScalarType.COMPLEXFLOAT: "complex64",
    ScalarType.COMPLEXDOUBLE: "complex128",
    ScalarType.BOOL: "bool",
    ScalarType.BFLOAT16: "bfloat16",
    ScalarType.UINT16: "uint16",
    ScalarType.FLOAT8E4M3FN: "float8_e4m3fn",
    ScalarType.FLOAT8E5M2: "float8_e5m2",
    ScalarType.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
    ScalarType.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
    ScalarType.FLOAT8E8M0FNU: "float8_e8m0fnu",
    ScalarType.UINT32: "uint32",
    ScalarType.UINT64: "uint64",
}

_INT64_MAX = 2**63 - 1


def dtype_name(dtype: ScalarType) -> str:
    """torch's name of a dtype ("float32"); "unknown" for ScalarType.UNKNOWN."""
    return DTYPE_NAMES.get(dtype, "unknown")


def concrete(meta: TensorMeta, where: str) -> tuple[list[int], list[int], int]:
    """A stored tensor's sizes, strides and storage offset as ints (archive-bad-tensor-meta)."""
    sizes = [_int(s, f"{where}: size {i}") for i, s in enumerate(meta.sizes)]
    strides = [_int(s, f"{where}: stride {i}") for i, s in enumerate(meta.strides)]
    offset = _int(meta.storage_offset, f"{where}: storage offset")
    if len(sizes) != len(strides):
        raise ArchiveFailure(
            "archive-bad-tensor-meta",
            f"{where}: {len(sizes)} sizes but {len(strides)} strides",
        )
    return sizes, strides, offset


def _int(value: SymInt, where: str) -> int:
    if not isinstance(value, SymIntAsInt):
        raise ArchiveFailure(
            "archive-bad-tensor-meta", f"{where} is symbolic; a stored tensor needs integers"
        )
    if value.as_int < 0:
        raise ArchiveFailure("archive-bad-tensor-meta", f"{where} is negative ({value.as_int})")
    if value.as_int > _INT64_MAX:
        raise ArchiveFailure("archive-bad-tensor-meta", f"{where} does not fit in int64")
    return value.as_int


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
