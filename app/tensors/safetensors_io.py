"""Raw tensors to and from the safetensors format, without torch.

The format: an 8-byte little-endian header length, a JSON header mapping names to dtype, shape
and data offsets (plus an optional string map `__metadata__`), then the packed data. We write
and parse it ourselves (the rules of the reference implementation), so no torch and no numpy
dtype is needed for bf16, fp8 or complex values.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeGuard

import orjson

from app.archive.raw import RawTensor, TensorKind
from app.archive.tensors import dtype_name
from app.failure import BridgeFailure
from app.tensors.views import KINDS, View, checked_sizes, contiguous_bytes, contiguous_meta
from schema import Device, Issue, Layout, ScalarType, SymIntAsInt, TensorMeta
from schema.dtypes import ITEMSIZE
from schema.errors import pointer

#: safetensors' dtype names; complex32 and complex128 have none.
SAFETENSORS_DTYPES: dict[ScalarType, str] = {
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
SCALAR_TYPES: dict[str, ScalarType] = {name: dtype for dtype, name in SAFETENSORS_DTYPES.items()}
#: Names the format knows that no torch ScalarType holds (sub-byte floats).
_FOREIGN_DTYPES = frozenset({"F4", "F6_E2M3", "F6_E3M2"})

KINDS_KEY = "pt2serde.kinds"
REQUIRES_GRAD_KEY = "pt2serde.requires_grad"
#: tied tensors: each alias name -> the stored tensor whose storage and view it shares. The
#: format holds no aliases, so a tie (an LM head sharing the embedding) is stored once and named.
ALIASES_KEY = "pt2serde.aliases"
METADATA_KEY = "__metadata__"
#: The reference implementation refuses larger headers.
MAX_HEADER_BYTES = 100_000_000

_LENGTH = struct.Struct("<Q")


@dataclass(frozen=True)
class StoredTensor:
    """A tensor to write whose storage bytes are read only when its turn comes."""

    name: str
    kind: TensorKind
    meta: TensorMeta
    #: bytes of its storage.
    size: int
    #: its storage bytes, in order: a stream of blocks, or the whole bytes at once.
    read: Callable[[], Iterable[bytes]]

    @classmethod
    def of(cls, raw: RawTensor) -> StoredTensor:
        """A raw tensor whose bytes are already in memory."""
        data = raw.data
        return cls(raw.name, raw.kind, raw.meta, len(data), lambda: (data,))


def to_safetensors(
    tensors: Iterable[RawTensor], metadata: Mapping[str, str] | None = None
) -> bytes:
    """A safetensors file of the tensors (made contiguous), kinds and requires_grad in metadata."""
    out = io.BytesIO()
    write_safetensors(out, [StoredTensor.of(t) for t in tensors], metadata)
    return out.getvalue()


def write_safetensors(
    out: IO[bytes],
    tensors: Iterable[StoredTensor],
    metadata: Mapping[str, str] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> None:
    """`to_safetensors` written to `out` one tensor at a time: the header comes from the metas,
    and a tensor whose storage is exactly its packed elements is copied block by block. A tensor
    `aliases` names (alias -> the tensor it is tied to) is not stored: its name, kind and
    requires_grad go to the metadata, and `from_safetensors` ties it again."""
    every = list(tensors)
    tied = dict(aliases or {})
    _refuse_unwritable(every, tied)
    items = [t for t in every if t.name not in tied]
    views = checked_sizes((t.name, t.meta, t.size) for t in items)
    # The reference writer's order: widest elements first, so every tensor stays aligned.
    items.sort(key=lambda t: (-views[t.name].itemsize, t.name))
    meta: dict[str, str] = dict(metadata or {})
    meta[KINDS_KEY] = orjson.dumps(
        {t.name: t.kind for t in every}, option=orjson.OPT_SORT_KEYS
    ).decode()
    meta[REQUIRES_GRAD_KEY] = orjson.dumps(
        sorted(t.name for t in every if t.meta.requires_grad)
    ).decode()
    if tied:
        meta[ALIASES_KEY] = orjson.dumps(tied, option=orjson.OPT_SORT_KEYS).decode()
    header: dict[str, Any] = {METADATA_KEY: meta}
    offset = 0
    for t in items:
        view = views[t.name]
        nbytes = view.numel * view.itemsize
        header[t.name] = {
            "dtype": SAFETENSORS_DTYPES[t.meta.dtype],
            "shape": list(view.sizes),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    head = orjson.dumps(header)
    head += b" " * (-len(head) % 8)
    out.write(_LENGTH.pack(len(head)))
    out.write(head)
    _write_data(out, items, views)


def _refuse_unwritable(items: list[StoredTensor], aliases: Mapping[str, str]) -> None:
    """Refuse duplicate names, dtypes safetensors has no name for, and an alias whose tensor is
    not stored or has another dtype or shape."""
    by_name = {t.name: t for t in items}
    wrong = sorted(
        alias
        for alias, target in aliases.items()
        if alias not in by_name
        or target not in by_name
        or target in aliases
        or _shape_key(by_name[alias].meta) != _shape_key(by_name[target].meta)
    )
    if wrong:  # the callers find ties in an archive's configs: a wrong one is our bug
        raise ValueError(f"aliases must name a stored tensor of its dtype and shape: {wrong}")
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
    unsupported = [t for t in items if t.meta.dtype not in SAFETENSORS_DTYPES]
    if unsupported:
        raise BridgeFailure(
            "safetensors-unsupported-dtype",
            "safetensors cannot store "
            + ", ".join(f"{t.name} ({dtype_name(t.meta.dtype)})" for t in unsupported),
            [
                Issue("safetensors-unsupported-dtype", pointer([t.name]), dtype_name(t.meta.dtype))
                for t in unsupported
            ],
        )


def _shape_key(meta: TensorMeta) -> tuple[ScalarType, str]:
    return meta.dtype, repr(meta.sizes)


def _write_data(out: IO[bytes], items: list[StoredTensor], views: Mapping[str, View]) -> None:
    """Each tensor's elements in header order, streamed where its storage is exactly them."""
    for t in items:
        view = views[t.name]
        if view.is_contiguous() and t.size == view.numel * view.itemsize:
            written = 0
            for block in t.read():
                out.write(block)
                written += len(block)
            if written != t.size:
                raise BridgeFailure(
                    "tensor-data-invalid",
                    f"{t.name!r} gave {written} bytes of storage, not the {t.size} it declares",
                )
        else:
            # A view of part of its storage: the storage is needed whole to pick its elements.
            whole = RawTensor(t.name, t.kind, t.meta, b"".join(t.read()))
            out.write(contiguous_bytes(whole, view))


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
    aliases = _stored_aliases(metadata, header, issues)
    entries, spans, foreign = _entries(header, issues)
    position = _packed(spans, issues)
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
            if name not in header and name not in aliases
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
    for alias, target in aliases.items():
        # the same bytes object: the writer stores it once and torch's tensors share it
        tied = tensors[target]
        kind = (kinds or {}).get(alias) or stored_kinds.get(alias) or default_kind
        requires_grad = alias in grads if grads is not None else kind == "parameter"
        meta = tied.meta.model_copy(update={"requires_grad": requires_grad})
        tensors[alias] = RawTensor(alias, kind, meta, tied.data)
    return tensors


_Entry = tuple[int, int, str, ScalarType, list[int]]


def _entries(
    header: dict[str, Any], issues: list[Issue]
) -> tuple[list[_Entry], list[tuple[int, int, str]], list[str]]:
    """The header's tensors checked one by one: readable entries, every span, foreign dtypes."""
    entries: list[_Entry] = []
    spans: list[tuple[int, int, str]] = []
    foreign: list[str] = []
    for name, entry in header.items():
        parsed = _entry(name, entry, issues)
        if parsed is None:
            continue
        stored, shape, begin, end = parsed
        spans.append((begin, end, name))
        if stored in _FOREIGN_DTYPES:
            foreign.append(f"{name} ({stored})")
            continue
        dtype = SCALAR_TYPES[stored]
        numel = 1
        for size in shape:
            numel *= size
        if end - begin != numel * ITEMSIZE[dtype]:
            issues.append(
                Issue(
                    "safetensors-bad-offsets",
                    pointer([name, "data_offsets"]),
                    f"{end - begin} bytes for {numel} {stored} elements",
                )
            )
            continue
        entries.append((begin, end, name, dtype, shape))
    return entries, spans, foreign


def _packed(spans: list[tuple[int, int, str]], issues: list[Issue]) -> int:
    """Where the packed data ends; a gap or an overlap between tensors is an issue."""
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
    return position


def safetensors_names(source: Path | bytes) -> list[str]:
    """The names of a safetensors file's tensors, from its header alone."""
    if isinstance(source, bytes):
        return _names(_split(source)[0])
    with source.open("rb") as f:
        total = f.seek(0, io.SEEK_END)
        f.seek(0)
        head = f.read(_LENGTH.size)
        size = _header_size(head, total)
        return _names(_header(f.read(size)))


def _names(header: dict[str, Any]) -> list[str]:
    metadata = header.get(METADATA_KEY)
    aliases = _stored_aliases(metadata, header, []) if isinstance(metadata, dict) else {}
    return [name for name in header if name != METADATA_KEY] + list(aliases)


def _split(data: bytes) -> tuple[dict[str, Any], memoryview]:
    size = _header_size(data[: _LENGTH.size], len(data))
    header = _header(data[_LENGTH.size : _LENGTH.size + size])
    return header, memoryview(data)[_LENGTH.size + size :]


def _header_size(head: bytes, total: int) -> int:
    if total < _LENGTH.size:
        raise BridgeFailure("safetensors-invalid", f"{total} bytes is too short for a header")
    (size,) = _LENGTH.unpack_from(head)
    if size > MAX_HEADER_BYTES or _LENGTH.size + size > total:
        raise BridgeFailure(
            "safetensors-invalid",
            f"header length {size} does not fit in {total} bytes (limit {MAX_HEADER_BYTES})",
        )
    return int(size)


def _header(raw: bytes) -> dict[str, Any]:
    try:
        header = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BridgeFailure("safetensors-invalid", f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise BridgeFailure("safetensors-invalid", "header is not a JSON object")
    return header


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


def _stored_aliases(
    metadata: dict[str, Any], header: dict[str, Any], issues: list[Issue]
) -> dict[str, str]:
    """Tied tensors: alias -> a stored tensor of the file (not itself an alias)."""
    text = metadata.get(ALIASES_KEY)
    if text is None:
        return {}
    try:
        aliases = orjson.loads(text) if isinstance(text, str) else None
    except orjson.JSONDecodeError:
        aliases = None
    if (
        not isinstance(aliases, dict)
        or not all(isinstance(t, str) for t in aliases.values())
        or any(a in header or a == METADATA_KEY for a in aliases)
        or any(t not in header or t == METADATA_KEY for t in aliases.values())
    ):
        issues.append(
            Issue(
                "safetensors-bad-metadata",
                pointer([METADATA_KEY, ALIASES_KEY]),
                "must be a JSON object naming, for each tied tensor not stored, a stored one",
            )
        )
        return {}
    return aliases


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
    if not isinstance(dtype, str) or (dtype not in SCALAR_TYPES and dtype not in _FOREIGN_DTYPES):
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
