"""Writing a .pt2 archive in torch 2.13's layout, without torch.

Members are stored uncompressed with their data aligned to 64 bytes (torch pads the local
header's extra field with an "FB" block for that, so weights can be memory-mapped), in torch's
order; the zip always ends with zip64 end records, as torch's writer does. Unlike torch, the
local headers carry the CRC and sizes (no data descriptors) since every size is known up front,
and the output is deterministic: fixed timestamps and a serialization id derived from the
members' CRCs. Members copied from another archive are streamed (`Streamed`): their declared
size and CRC go into the header, and the bytes are checked against both as they pass.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app import files
from app.archive.errors import ArchiveFailure
from app.archive.member_names import check_name
from app.archive.pt2 import (
    ARCHIVE_FORMAT,
    ARCHIVE_VERSION,
    BYTEORDER,
    CONSTANTS_CONFIG,
    CONSTANTS_DIR,
    DATA_VERSION,
    EXTRA_DIR,
    MODEL_DOCUMENT,
    SAMPLE_INPUTS,
    SERIALIZATION_ID,
    WEIGHTS_CONFIG,
    WEIGHTS_DIR,
)
from app.archive.raw import RawTensor, Streamed, StreamedTensor
from app.archive.tensors import check_storage
from schema import PayloadConfig, PayloadMeta, dump

DEFAULT_ROOT = "archive"
ALIGNMENT = 64
#: torch's zip writer declares this zip file format version in `.data/version`.
DATA_VERSION_VALUE = b"6\n"

_ZIP64_LIMIT = 0xFFFFFFFF
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF
_VERSION_ZIP64 = 45
_VERSION_PLAIN = 20
_FLAG_UTF8 = 0x0800
_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01, the earliest DOS date: reproducible output
_PAD_TAG = b"FB"
_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
_EOCD64 = struct.Struct("<4sQHHIIQQQQ")
_LOCATOR64 = struct.Struct("<4sIQI")
_EOCD = struct.Struct("<4sHHHHIIH")


Data = bytes | Streamed


class Sink(Protocol):
    """Where an archive is written: a binary file, or anything with its write and flush."""

    def write(self, data: bytes, /) -> object:
        """Append bytes."""
        ...

    def flush(self) -> object:
        """Push buffered bytes on."""
        ...


@dataclass(frozen=True)
class _Written:
    name: bytes
    crc: int
    size: int
    offset: int


class _ZipWriter:
    """A minimal stored-only zip writer with torch's 64-byte data alignment."""

    def __init__(self, out: Sink) -> None:
        self._out = out
        self._pos = 0
        self._written: list[_Written] = []

    def add(self, name: str, data: Data) -> None:
        """Append one stored member (a streamed one is copied chunk by chunk)."""
        raw_name = name.encode("utf-8")
        crc, size = (
            (zlib.crc32(data), len(data)) if isinstance(data, bytes) else (data.crc, data.size)
        )
        big = size >= _ZIP64_LIMIT
        zip64 = struct.pack("<HHQQ", 1, 16, size, size) if big else b""
        unpadded = self._pos + _LOCAL.size + len(raw_name) + len(zip64) + 4
        pad = -unpadded % ALIGNMENT
        extra = zip64 + _PAD_TAG + struct.pack("<H", pad) + b"Z" * pad
        header = _LOCAL.pack(
            b"PK\x03\x04",
            _VERSION_ZIP64 if big else _VERSION_PLAIN,
            _FLAG_UTF8,
            0,
            0,
            _DOS_DATE,
            crc,
            _U32 if big else size,
            _U32 if big else size,
            len(raw_name),
            len(extra),
        )
        self._written.append(_Written(raw_name, crc, size, self._pos))
        self._emit(header, raw_name, extra)
        if isinstance(data, bytes):
            self._emit(data)
        else:
            self._copy(name, data)

    def _copy(self, name: str, data: Streamed) -> None:
        crc = 0
        start = self._pos
        for chunk in data.chunks():
            crc = zlib.crc32(chunk, crc)
            self._emit(chunk)
        if (self._pos - start, crc) != (data.size, data.crc):
            # the header already promised them: the output is unusable, and is never finished
            _refuse(f"member {name!r} did not have the size and CRC-32 its source declared")

    def finish(self) -> None:
        """Write the central directory and the (zip64) end records."""
        start = self._pos
        for item in self._written:
            self._emit(*self._central(item))
        end = self._pos
        count = len(self._written)
        self._emit(
            _EOCD64.pack(
                b"PK\x06\x06",
                _EOCD64.size - 12,
                _VERSION_ZIP64,
                _VERSION_ZIP64,
                0,
                0,
                count,
                count,
                end - start,
                start,
            ),
            _LOCATOR64.pack(b"PK\x06\x07", 0, end, 1),
            _EOCD.pack(
                b"PK\x05\x06",
                0,
                0,
                min(count, _U16),
                min(count, _U16),
                min(end - start, _U32),
                min(start, _U32),
                0,
            ),
        )
        self._out.flush()

    def _central(self, item: _Written) -> tuple[bytes, bytes, bytes]:
        big_size = item.size >= _ZIP64_LIMIT
        big_offset = item.offset >= _ZIP64_LIMIT
        fields = ([item.size, item.size] if big_size else []) + (
            [item.offset] if big_offset else []
        )
        extra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
        header = _CENTRAL.pack(
            b"PK\x01\x02",
            _VERSION_ZIP64,
            _VERSION_ZIP64 if fields else _VERSION_PLAIN,
            _FLAG_UTF8,
            0,
            0,
            _DOS_DATE,
            item.crc,
            _U32 if big_size else item.size,
            _U32 if big_size else item.size,
            len(item.name),
            len(extra),
            0,
            0,
            0,
            0,
            _U32 if big_offset else item.offset,
        )
        return header, item.name, extra

    def _emit(self, *parts: bytes) -> None:
        for part in parts:
            self._out.write(part)
            self._pos += len(part)

    def crcs(self) -> Iterable[int]:
        """CRC-32 of each member written so far."""
        return (item.crc for item in self._written)


def write_archive(
    target: str | os.PathLike[str] | Sink,
    documents: dict[str, bytes],
    tensors: Sequence[RawTensor | StreamedTensor],
    *,
    opaque_members: Mapping[str, Data] | None = None,
    root: str = DEFAULT_ROOT,
) -> None:
    """Write a .pt2 that `torch.export.load` opens; a path is replaced atomically.

    `documents` maps model names to document JSON bytes. With one model, tensors are named
    by their FQN; with several, "<model>/<fqn>". Tensors given the same bytes (or `Streamed`)
    object (as `Archive.raw_tensors` and `streamed_tensors` return for views of one storage)
    share one member, so aliasing survives; a `pickled` tensor's bytes are written as its
    `use_pickle` payload. `opaque_members` carries root-relative
    `data/sample_inputs/<model>.pt` and `extra/<name>` members as they are; missing sample
    inputs are written empty, which torch loads as "no example inputs".
    """
    members = _members(root, documents, tensors, opaque_members or {})
    if isinstance(target, str | os.PathLike):
        _replace(Path(target), members)
    else:
        _write(target, members)


def _members(
    root: str,
    documents: dict[str, bytes],
    tensors: Sequence[RawTensor | StreamedTensor],
    opaque: Mapping[str, Data],
) -> list[tuple[str, Data]]:
    """Every member in torch's order, validated against what the reader accepts."""
    if "/" in root:
        _refuse(f"root {root!r} must be a single folder name")
    check_name(root)
    if not documents:
        _refuse("there must be at least one document")
    for model in documents:
        if not model or "/" in model:
            _refuse(f"model name {model!r} must be a non-empty name without '/'")
        check_name(f"{root}/{MODEL_DOCUMENT.format(model)}")
    by_model = _tensors_by_model(documents, tensors)
    allowed = {SAMPLE_INPUTS.format(model) for model in documents}
    for name in opaque:
        if name not in allowed and not (name.startswith(EXTRA_DIR) and len(name) > len(EXTRA_DIR)):
            _refuse(
                f"opaque member {name!r} is neither data/sample_inputs/<model>.pt nor extra/<name>"
            )
        check_name(f"{root}/{name}")
    out: list[tuple[str, Data]] = []
    counters = {WEIGHTS_DIR: 0, CONSTANTS_DIR: 0}
    for model, document in documents.items():
        weights = [(fqn, t) for fqn, t in by_model[model] if t.kind != "constant"]
        constants = [(fqn, t) for fqn, t in by_model[model] if t.kind == "constant"]
        for directory, prefix, items, config_name in (
            (WEIGHTS_DIR, "weight_", weights, WEIGHTS_CONFIG),
            (CONSTANTS_DIR, "tensor_", constants, CONSTANTS_CONFIG),
        ):
            config: dict[str, PayloadMeta] = {}
            shared: dict[tuple[int, int], str] = {}
            for fqn, tensor in items:
                key = (id(tensor.data), int(tensor.meta.dtype))
                if key not in shared:
                    shared[key] = f"{prefix}{counters[directory]}"
                    counters[directory] += 1
                    out.append((directory + shared[key], tensor.data))
                config[fqn] = PayloadMeta(
                    path_name=shared[key],
                    is_param=tensor.kind == "parameter",
                    use_pickle=tensor.pickled,
                    tensor_meta=tensor.meta,
                )
            out.append((config_name.format(model), dump(PayloadConfig(config=config))))
        out.append((MODEL_DOCUMENT.format(model), document))
        out.append((SAMPLE_INPUTS.format(model), opaque.get(SAMPLE_INPUTS.format(model), b"")))
    out.extend((n, opaque[n]) for n in sorted(opaque) if n.startswith(EXTRA_DIR))
    out.append((ARCHIVE_FORMAT, b"pt2"))
    out.append((ARCHIVE_VERSION, b"0"))
    out.append((DATA_VERSION, DATA_VERSION_VALUE))
    out.append((BYTEORDER, b"little"))
    return [(f"{root}/{name}", data) for name, data in out]


def _tensors_by_model(
    documents: dict[str, bytes], tensors: Sequence[RawTensor | StreamedTensor]
) -> dict[str, list[tuple[str, RawTensor | StreamedTensor]]]:
    by_model: dict[str, list[tuple[str, RawTensor | StreamedTensor]]] = {
        model: [] for model in documents
    }
    seen: set[str] = set()
    single = next(iter(documents)) if len(documents) == 1 else None
    for tensor in tensors:
        if tensor.name in seen:
            _refuse(f"tensor {tensor.name!r} is given twice")
        seen.add(tensor.name)
        model, _, fqn = (
            (single, "", tensor.name) if single is not None else tensor.name.partition("/")
        )
        if model not in by_model or not fqn:
            _refuse(f"tensor {tensor.name!r} must be named '<model>/<fqn>' with a known model")
        if tensor.kind not in ("parameter", "buffer", "constant"):
            _refuse(f"tensor {tensor.name!r} has kind {tensor.kind!r}")
        size = len(tensor.data) if isinstance(tensor.data, bytes) else tensor.data.size
        if not tensor.pickled:  # a pickled payload is carried as it is, never read
            check_storage(tensor.meta, size, f"tensor {tensor.name!r}")
        by_model[model].append((fqn, tensor))
    return by_model


def _refuse(message: str) -> None:
    raise ArchiveFailure("archive-write-refused", message)


def _write(out: Sink, members: list[tuple[str, Data]]) -> None:
    writer = _ZipWriter(out)
    for name, data in members:
        writer.add(name, data)
    digest = hashlib.sha256(b"".join(crc.to_bytes(4, "little") for crc in writer.crcs()))
    identifier = str(int.from_bytes(digest.digest(), "big") % 10**40).zfill(40)
    root = members[0][0].split("/", 1)[0]
    writer.add(f"{root}/{SERIALIZATION_ID}", identifier.encode())
    writer.finish()


def _replace(path: Path, members: list[tuple[str, Data]]) -> None:
    """Write next to `path`, fsync, then rename over it: never a half-written archive."""
    with files.atomic_writer(path) as out:
        _write(out, members)
