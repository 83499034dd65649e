"""Raw tensors to and from the safetensors format, without torch.

The format: an 8-byte little-endian header length, a JSON header mapping names to dtype, shape
and data offsets (plus an optional string map `__metadata__`), then the packed data. We write
and parse it ourselves (the rules of the reference implementation), so no torch and no numpy
dtype is needed for bf16, fp8 or complex values.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

import orjson

from app.archive.raw import RawTensor, TensorKind
from app.bridge.errors import BridgeFailure
from app.bridge.tensors import KINDS, checked_views, contiguous_bytes, contiguous_meta
from schema import Device, Issue, Layout, ScalarType, SymIntAsInt, TensorMeta
from schema.dtypes import ITEMSIZE
from schema.errors import pointer

#: safetensors' dtype names; complex32 and complex128 have none.
DTYPE_NAMES: dict[ScalarType, str] = {
    ScalarType.BOOL: "BOOL",
    ScalarType.BYTE: "U8",
    ScalarType.CHAR: "I8",
    ScalarType.SHORT: "I16",
    ScalarType.UINT16: "U16",
    ScalarType.HALF: "F16",
    ScalarType.BFLOAT16: "BF16",
    ScalarType.INT: "I32",
    ScalarType.UINT32: "U32",
    ScalarType.FLOAT: "F32",
    ScalarType.COMPLEXFLOAT: "C64",
    ScalarType.DOUBLE: "F64",
    ScalarType.LONG: "I64",
    ScalarType.UINT64: "U64",
    ScalarType.FLOAT8E4M3FN: "F8_E4M3",
    ScalarType.FLOAT8E5M2: "F8_E5M2",
    ScalarType.FLOAT8E4M3FNUZ: "F8_E4M3FNUZ",
    ScalarType.FLOAT8E5M2FNUZ: "F8_E5M2FNUZ",
    ScalarType.FLOAT8E8M0FNU: "F8_E8M0",
}
DTYPES: dict[str, ScalarType] = {name: dtype for dtype, name in DTYPE_NAMES.items()}
#: Names the format knows that no torch ScalarType holds (sub-byte floats).
_FOREIGN_DTYPES = frozenset({"F4", "F6_E2M3", "F6_E3M2"})

KINDS_KEY = "pt2serde.kinds"
REQUIRES_GRAD_KEY = "pt2serde.requires_grad"
METADATA_KEY = "__metadata__"
#: The reference implementation refuses larger headers.
MAX_HEADER_BYTES = 100_000_000

_LENGTH = struct.Struct("<Q")


def to_safetensors(
    tensors: Iterable[RawTensor], metadata: Mapping[str, str] | None = None
) -> bytes:
    """A safetensors file of the tensors (made contiguous), kinds and requires_grad in metadata."""
    items = list(tensors)
    names = [t.name for t in items]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BridgeFailure(
            "tensors-duplicate-name",
            f"tensor names must be unique: {', '.join(duplicates)}",
            [
                Issue("tensor-duplicate-name", pointer([n]), "appears more than once")
                for n in duplicates
            ],
        )
    unsupported = [t for t in items if t.meta.dtype not in DTYPE_NAMES]
    if unsupported:
        raise BridgeFailure(
            "safetensors-unsupported-dtype",
            "safetensors cannot store "
            + ", ".join(f"{t.name} ({t.meta.dtype.name})" for t in unsupported),
            [
                Issue("safetensors-unsupported-dtype", pointer([t.name]), t.meta.dtype.name)
                for t in unsupported
            ],
        )
    views = checked_views(items)
    # The reference writer's order: widest elements first, so every tensor stays aligned.
    items.sort(key=lambda t: (-views[t.name].itemsize, t.name))
    meta: dict[str, str] = dict(metadata or {})
    meta[KINDS_KEY] = orjson.dumps(
        {t.name: t.kind for t in items}, option=orjson.OPT_SORT_KEYS
    ).decode()
    meta[REQUIRES_GRAD_KEY] = orjson.dumps(
        sorted(t.name for t in items if t.meta.requires_grad)
    ).decode()
    header: dict[str, Any] = {METADATA_KEY: meta}
    chunks: list[bytes] = []
    offset = 0
    for t in items:
        view = views[t.name]
        chunk = contiguous_bytes(t, view)
        header[t.name] = {
            "dtype": DTYPE_NAMES[t.meta.dtype],
            "shape": list(view.sizes),
            "data_offsets": [offset, offset + len(chunk)],
        }
        chunks.append(chunk)
        offset += len(chunk)
    head = orjson.dumps(header)
    head += b" " * (-len(head) % 8)
    return b"".join([_LENGTH.pack(len(head)), head, *chunks])


def from_safetensors(
    data: bytes,
    kinds: Mapping[str, TensorKind] | None = None,
    *,
    default_kind: TensorKind = "parameter",
) -> dict[str, RawTensor]:
    """Raw tensors of a safetensors file; kinds from `kinds`, else its metadata, else the default.

    BridgeFailure `safetensors-invalid` lists every problem of a malformed file;
    `safetensors-unsupported-dtype` names tensors no torch dtype can hold.
    """
    header, body = _split(data)
    issues: list[Issue] = []
    metadata = _metadata(header.pop(METADATA_KEY, None), issues)
    stored_kinds = _stored_kinds(metadata, issues)
    grads = _stored_requires_grad(metadata, issues)
    entries: list[tuple[int, int, str, ScalarType, list[int]]] = []
    spans: list[tuple[int, int, str]] = []
    foreign: list[str] = []
    for name, entry in header.items():
        parsed = _entry(name, entry, issues)
        if parsed is None:
            continue
        dtype_name, shape, begin, end = parsed
        spans.append((begin, end, name))
        if dtype_name in _FOREIGN_DTYPES:
            foreign.append(f"{name} ({dtype_name})")
            continue
        dtype = DTYPES[dtype_name]
        numel = 1
        for size in shape:
            numel *= size
        if end - begin != numel * ITEMSIZE[dtype]:
            issues.append(
                Issue(
                    "safetensors-bad-offsets",
                    pointer([name, "data_offsets"]),
                    f"{end - begin} bytes for {numel} {dtype_name} elements",
                )
            )
            continue
        entries.append((begin, end, name, dtype, shape))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            issues.append(
                Issue(
                    "safetensors-bad-offsets",
                    pointer([name, "data_offsets"]),
                    f"starts at byte {begin}; the data must be packed, expected {position}",
                )
            )
        position = max(position, end)
    if not issues and position != len(body):
        issues.append(
            Issue(
                "safetensors-bad-offsets",
                "",
                f"the tensors cover {position} bytes of a {len(body)}-byte data section",
            )
        )
    if kinds:
        issues.extend(
            Issue("safetensors-unknown-tensor", pointer([name]), "a kind was given for no tensor")
            for name in kinds
            if name not in header
        )
    if issues:
        raise BridgeFailure(
            "safetensors-invalid", f"{len(issues)} problem(s) in the safetensors file", issues
        )
    if foreign:
        raise BridgeFailure(
            "safetensors-unsupported-dtype", "no torch dtype holds " + ", ".join(foreign)
        )
    tensors: dict[str, RawTensor] = {}
    for begin, end, name, dtype, shape in entries:
        kind = (kinds or {}).get(name) or stored_kinds.get(name) or default_kind
        requires_grad = name in grads if grads is not None else kind == "parameter"
        meta = contiguous_meta(_blank_meta(dtype, requires_grad), shape)
        tensors[name] = RawTensor(name, kind, meta, bytes(body[begin:end]))
    return tensors


def _split(data: bytes) -> tuple[dict[str, Any], memoryview]:
    if len(data) < _LENGTH.size:
        raise BridgeFailure("safetensors-invalid", f"{len(data)} bytes is too short for a header")
    (size,) = _LENGTH.unpack_from(data)
    if size > MAX_HEADER_BYTES or _LENGTH.size + size > len(data):
        raise BridgeFailure(
            "safetensors-invalid",
            f"header length {size} does not fit in {len(data)} bytes (limit {MAX_HEADER_BYTES})",
        )
    raw = data[_LENGTH.size : _LENGTH.size + size]
    try:
        header = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BridgeFailure("safetensors-invalid", f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise BridgeFailure("safetensors-invalid", "header is not a JSON object")
    return header, memoryview(data)[_LENGTH.size + size :]


def _metadata(value: Any, issues: list[Issue]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        issues.append(
            Issue("safetensors-bad-metadata", "/" + METADATA_KEY, "must map strings to strings")
        )
        return {}
    return value


def _stored_kinds(metadata: dict[str, str], issues: list[Issue]) -> dict[str, TensorKind]:
    text = metadata.get(KINDS_KEY)
    if text is None:
        return {}
    try:
        kinds = orjson.loads(text)
    except orjson.JSONDecodeError:
        kinds = None
    if not isinstance(kinds, dict) or not all(k in KINDS for k in kinds.values()):
        issues.append(
            Issue(
                "safetensors-bad-metadata",
                pointer([METADATA_KEY, KINDS_KEY]),
                f"must be a JSON object of kinds ({', '.join(sorted(KINDS))})",
            )
        )
        return {}
    return kinds


def _stored_requires_grad(metadata: dict[str, str], issues: list[Issue]) -> set[str] | None:
    text = metadata.get(REQUIRES_GRAD_KEY)
    if text is None:
        return None
    try:
        names = orjson.loads(text)
    except orjson.JSONDecodeError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        issues.append(
            Issue(
                "safetensors-bad-metadata",
                pointer([METADATA_KEY, REQUIRES_GRAD_KEY]),
                "must be a JSON list of tensor names",
            )
        )
        return None
    return set(names)


def _entry(name: str, entry: Any, issues: list[Issue]) -> tuple[str, list[int], int, int] | None:
    path = pointer([name])
    if not isinstance(entry, dict):
        issues.append(Issue("safetensors-bad-entry", path, "must be an object"))
        return None
    found = len(issues)
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or (dtype not in DTYPES and dtype not in _FOREIGN_DTYPES):
        issues.append(Issue("safetensors-bad-dtype", path + "/dtype", f"unknown dtype {dtype!r}"))
    shape = entry.get("shape")
    if not _ints(shape):
        issues.append(
            Issue("safetensors-bad-shape", path + "/shape", "must be a list of ints >= 0")
        )
    offsets = entry.get("data_offsets")
    if not _ints(offsets) or len(offsets) != 2 or offsets[0] > offsets[1]:
        issues.append(
            Issue(
                "safetensors-bad-offsets",
                path + "/data_offsets",
                "must be [begin, end] with begin <= end",
            )
        )
    extra = sorted(set(entry) - {"dtype", "shape", "data_offsets"})
    if extra:
        issues.append(Issue("safetensors-bad-entry", path, f"unknown keys: {', '.join(extra)}"))
    if len(issues) > found or not (isinstance(dtype, str) and _ints(shape) and _ints(offsets)):
        return None
    return dtype, shape, offsets[0], offsets[1]


def _ints(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)


def _blank_meta(dtype: ScalarType, requires_grad: bool) -> TensorMeta:
    return TensorMeta(
        dtype=dtype,
        sizes=[],
        requires_grad=requires_grad,
        device=Device(type="cpu"),
        strides=[],
        storage_offset=SymIntAsInt(as_int=0),
        layout=Layout.Strided,
    )
