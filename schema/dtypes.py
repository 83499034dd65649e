"""Element sizes and torch's names of the wire dtypes (facts of ScalarType, torch-free)."""

from __future__ import annotations

from schema.models import ScalarType

#: bytes per element of each dtype torch can store raw (UNKNOWN has none).
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
