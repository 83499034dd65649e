"""Tensor payloads stored smaller and read back byte for byte: byte planes, zstd, XOR deltas.

A payload of elements `width` bytes wide is cut into chunks of `CHUNK` bytes; each chunk is
stored raw, as its byte planes compressed with zstd (every element's first byte, then every
second byte, ...: the sign and exponent bytes of floating-point weights repeat far more than
their mantissa bytes, so apart they compress), or as the byte planes of its XOR with the same
chunk of a base payload (a tensor of the version it was fine-tuned from: the bits a few steps of
training left alone are zeros). The stored object is a frame:

    head   "PT2Z", version, width, flags (1: a delta), raw size, chunk size, chunk count
    base   the sha256 of the base payload's raw bytes (zeros when no chunk is a delta)
    kinds  one byte per chunk (0 raw, 1 planes, 2 planes of the XOR with the base)
    sizes  each chunk's stored length (u32)
    bodies

A frame is always shorter than its payload (a payload is framed only when that saves bytes), so
an object whose stored size is its payload's size is the raw bytes: whatever a push stored under
a digest (raw, framed alone, or a delta against any base) reads back as the same bytes, and
nothing about the form needs to be looked up. Chunks decode on their own, so a read at any
offset decodes only the chunks it covers (and the base's same chunks); a reader decodes the next
chunks ahead on a pool of threads while its caller consumes the current one (zstd and numpy
release the GIL). A delta reads its base's chunks as planes and XORs its own planes with them:
a chain's chunk is interleaved into raw bytes once, at its top, not once per object.
"""

from __future__ import annotations

import io
import os
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import numpy as np

from app.registry.blobs.base import Reader

if TYPE_CHECKING:
    import zstandard

#: raw bytes per chunk: a multiple of every element width, large enough to compress well, small
#: enough that a Range read decodes little past what it asked for
CHUNK = 4 << 20
MAGIC = b"PT2Z"
_HEAD = struct.Struct("<4sBBBxQII")
_VERSION = 1
_DELTA = 1
RAW, PLANES, XOR = 0, 1, 2
#: chunks a reader decodes ahead of the one being read
_AHEAD = 2
#: bytes of a plane sampled to judge whether it would shrink
_SAMPLE = 1 << 16
#: bits per byte above which a plane is stored raw, without spending zstd's time on it: on the
#: fine-tune series' planes, zstd saved nothing on any plane above 7.9 bits (its block and table
#: overheads take what entropy coding would save)
_RAW_ENTROPY = 7.8
_decoders = ThreadPoolExecutor(max(2, os.cpu_count() or 2), "decode")
_local = threading.local()
#: a decoded chunk
Chunk = bytes | bytearray


@dataclass(frozen=True)
class Encoded:
    """What `encode` wrote: the frame's length, and whether any chunk is a delta."""

    stored: int
    delta: bool


def _frame_start(count: int) -> int:
    return _HEAD.size + 32 + count * 5


def _entropy(plane: np.ndarray[Any, np.dtype[np.uint8]]) -> float:
    """Bits per byte of the plane's byte frequencies, from a sample of it (a plane near 8 bits
    per byte would not shrink: it is stored as it is, without spending zstd's time on it)."""
    sample = plane[:: max(1, len(plane) // _SAMPLE)]
    counts = np.bincount(sample, minlength=256)
    p = counts[counts > 0] / len(sample)
    return float(-(p * np.log2(p)).sum())


def _body(data: Any, width: int, compress: Callable[[bytes], bytes]) -> bytes:
    """A chunk's byte planes, each compressed or (where that would not pay) raw: the planes'
    stored lengths (u32 each; a plane's own length means raw), the planes, the tail (bytes
    past the last whole element)."""
    view = np.frombuffer(data, np.uint8)
    whole = len(view) - len(view) % width
    elements = view[:whole].reshape(-1, width)
    parts: list[bytes] = []
    for i in range(width):
        plane = np.ascontiguousarray(elements[:, i])
        packed = plane.tobytes()
        if len(plane) and _entropy(plane) < _RAW_ENTROPY:
            shrunk = compress(packed)
            if len(shrunk) < len(packed):
                packed = shrunk
        parts.append(packed)
    sizes = struct.pack(f"<{width}I", *(len(part) for part in parts))
    return b"".join([sizes, *parts, view[whole:].tobytes()])


@dataclass(frozen=True)
class Planes:
    """A chunk's byte planes (plane i: every element's i-th byte) and its tail (the bytes past
    its last whole element): the form a delta's base is read in, so that the delta's planes
    are XORed with the base's before the one interleaving of the raw bytes."""

    planes: list[np.ndarray[Any, np.dtype[np.uint8]]]
    tail: bytes


def _split(data: Any, width: int) -> Planes:
    """Raw bytes as their planes (strided views of them: no copy)."""
    view = np.frombuffer(data, np.uint8)
    whole = len(view) - len(view) % width
    elements = view[:whole].reshape(-1, width)
    return Planes([elements[:, i] for i in range(width)], view[whole:].tobytes())


def _unbody(body: bytes, width: int, length: int) -> Planes:
    """A chunk's planes from its `_body`."""
    count = length // width
    view = memoryview(body)
    sizes = struct.unpack_from(f"<{width}I", view)
    at = 4 * width
    planes = []
    for size in sizes:
        # a raw plane is read where the body holds it: no copy but the interleaving's
        part: Any = view[at : at + size]
        at += size
        if size != count:
            part = _decompressor().decompress(part, max_output_size=count)
        if len(part) != count:
            raise OSError(f"a chunk's byte plane holds {len(part)} bytes, not {count}")
        planes.append(np.frombuffer(part, np.uint8))
    if len(view) - at != length - count * width:
        raise OSError("a chunk's tail does not fit its length")
    return Planes(planes, body[at:])


def _interleaved(planes: Planes, width: int, length: int) -> bytearray:
    """The raw bytes of a chunk's planes."""
    out = bytearray(length)
    whole = length - len(planes.tail)
    target = np.frombuffer(out, np.uint8, whole).reshape(-1, width)
    for i, plane in enumerate(planes.planes):
        target[:, i] = plane
    out[whole:] = planes.tail
    return out


def _xor(a: Any, b: Any) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The XOR of two equally long byte strings."""
    return np.bitwise_xor(np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8))


def _compressor(level: int) -> zstandard.ZstdCompressor:
    """This thread's compressor at `level` (a compressor serves one thread at a time)."""
    # imported here, as the decompressor: only the registry's service stores and reads objects
    # (zstandard comes with the server extra), and the base install imports this module
    import zstandard

    known: dict[int, zstandard.ZstdCompressor] = _local.__dict__.setdefault("compressors", {})
    if level not in known:
        # a byte plane is near-random bytes with few repeats: its saving is zstd's entropy
        # coding of them, not matches, so the match finder is kept small and to long matches
        # (measured on fine-tune planes: 5-8% smaller, and faster, than the level's defaults)
        params = zstandard.ZstdCompressionParameters.from_level(
            level, hash_log=6, min_match=7, search_log=1
        )
        known[level] = zstandard.ZstdCompressor(compression_params=params)
    return known[level]


def _decompressor() -> zstandard.ZstdDecompressor:
    found: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if found is None:
        import zstandard

        found = _local.decompressor = zstandard.ZstdDecompressor()
    return found


def encode(
    source: BinaryIO,
    size: int,
    width: int,
    into: BinaryIO,
    base: BinaryIO | None = None,
    base_digest: str = "",
    level: int = 1,
) -> Encoded:
    """Write the frame of the `size` bytes `source` reads (elements `width` bytes wide) to
    `into`, each chunk in its smallest form: raw, planes, or (given the `base` payload's raw
    bytes, as many) planes of the XOR with the base."""
    count = max(1, -(-size // CHUNK))
    kinds = bytearray(count)
    sizes: list[int] = []
    compress = _compressor(level).compress
    into.seek(_frame_start(count))
    # the encoded forms tried on each chunk: both on the first, then the one that won it (a
    #: tensor's chunks are alike, and a second form would double the push's compression)
    trying = (PLANES,) if base is None else (XOR, PLANES)
    other = b""
    for index in range(count):
        chunk = _read_exact(source, min(CHUNK, size - index * CHUNK), "the payload")
        best, kind = chunk, RAW
        if base is not None:
            other = base.read(len(chunk))
            if len(other) != len(chunk):
                raise OSError(f"the base payload {base_digest} is shorter than the tensor")
        for form in trying:
            body = _body(chunk if form == PLANES else _xor(chunk, other), width, compress)
            if len(body) < len(best):
                best, kind = body, form
        if len(trying) > 1:
            trying = (kind,) if kind != RAW else trying
        kinds[index] = kind
        sizes.append(len(best))
        into.write(best)
    delta = XOR in kinds
    into.seek(0)
    into.write(_HEAD.pack(MAGIC, _VERSION, width, _DELTA if delta else 0, size, CHUNK, count))
    into.write(bytes.fromhex(base_digest) if delta else bytes(32))
    into.write(bytes(kinds))
    into.write(struct.pack(f"<{count}I", *sizes))
    return Encoded(_frame_start(count) + sum(sizes), delta)


def frame_base(head: bytes) -> str | None:
    """The base digest a frame's first bytes name (None: no chunk is a delta)."""
    magic, _, _, flags, _, _, _ = _HEAD.unpack_from(head)
    if magic != MAGIC or not flags & _DELTA:
        return None
    return head[_HEAD.size : _HEAD.size + 32].hex()


def open_stored(
    open_object: Callable[[str], BinaryIO], digest: str, size: int, planes: bool = False
) -> BinaryIO:
    """The raw bytes (`size` of them) of the object `digest`, however it is stored, readable and
    seekable; FileNotFoundError if it (or a base it needs) is not stored. `planes`: a frame is
    read by chunk planes (`Framed.planes`), as a delta reads its base."""
    handle = open_object(digest)
    try:
        stored = handle.seek(0, io.SEEK_END)
        handle.seek(0)
        if stored == size:
            return handle
        return cast(BinaryIO, Framed(handle, digest, size, open_object, planes))
    except BaseException:
        handle.close()
        raise


def _read_exact(handle: BinaryIO, size: int, what: str) -> bytes:
    data = handle.read(size)
    if len(data) != size:
        raise OSError(f"{what} ended {size - len(data)} bytes early")
    return data


class Framed(Reader):
    """A frame's raw bytes, decoded chunk by chunk as reads reach them (and a few ahead)."""

    def __init__(
        self,
        handle: BinaryIO,
        digest: str,
        size: int,
        open_object: Callable[[str], BinaryIO],
        planes: bool = False,
    ) -> None:
        super().__init__(size)
        self._planes = planes
        self._handle = handle
        self._digest = digest
        head = _read_exact(handle, _HEAD.size + 32, f"the object {digest}")
        magic, version, width, _, raw, chunk, count = _HEAD.unpack_from(head)
        if magic != MAGIC or version != _VERSION or raw != size or width == 0 or chunk == 0:
            raise OSError(f"the object {digest} is neither {size} raw bytes nor a frame of them")
        if count != max(1, -(-size // chunk)):
            raise OSError(f"the object {digest} has {count} chunks, not {-(-size // chunk)}")
        self._width, self._chunk = width, chunk
        self._base = frame_base(head)
        tail = _read_exact(handle, count * 5, f"the object {digest}")
        self._kinds = tail[:count]
        self._starts = [_frame_start(count)]
        for length in struct.unpack(f"<{count}I", tail[count:]):
            self._starts.append(self._starts[-1] + length)
        self._open = open_object
        self._base_handle: BinaryIO | None = None
        self._current: tuple[int, Chunk | Planes] | None = None
        # the first chunks set decoding now: a reader that opens the next payloads ahead of
        # its read (packing.Rebuilt) has them decoded meanwhile, each payload on a thread
        self._pending: dict[int, Future[Chunk | Planes]] = {
            index: self._decode(index) for index in range(min(_AHEAD, count))
        }

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._size:
            index, at = divmod(self._pos, self._chunk)
            data = self._decoded(index)
            if isinstance(data, Planes):
                raise OSError(f"the object {self._digest} is open as a delta's base")
            want = min(len(view) - done, len(data) - at)
            view[done : done + want] = data[at : at + want]
            done += want
            self._pos += want
        return done

    def planes(self, index: int) -> Planes:
        """Chunk `index`'s planes (of a frame opened with `planes`)."""
        data = self._decoded(index)
        if not isinstance(data, Planes):
            raise OSError(f"the object {self._digest} is not open as a delta's base")
        return data

    def _decoded(self, index: int) -> Chunk | Planes:
        """Chunk `index` decoded; the next ones set decoding meanwhile."""
        if self._current is not None and self._current[0] == index:
            return self._current[1]
        future = self._pending.pop(index, None) or self._decode(index)
        for stale in [i for i in self._pending if not index < i <= index + _AHEAD]:
            self._pending.pop(stale).cancel()
        for ahead in range(index + 1, min(index + _AHEAD + 1, len(self._kinds))):
            if ahead not in self._pending:
                self._pending[ahead] = self._decode(ahead)
        data = future.result()
        self._current = (index, data)
        return data

    def _decode(self, index: int) -> Future[Chunk | Planes]:
        """Read chunk `index`'s body (and its base's planes) here; decode it on the pool."""
        length = min(self._chunk, self._size - index * self._chunk)
        start, end = self._starts[index], self._starts[index + 1]
        self._handle.seek(start)
        body = _read_exact(self._handle, end - start, f"the object {self._digest}")
        kind = self._kinds[index]
        base = self._base_planes(index, length) if kind == XOR else None
        return _decoders.submit(_decode_chunk, kind, body, base, self._width, length, self._planes)

    def _base_planes(self, index: int, length: int) -> Planes:
        """The planes of the base's chunk `index` (decoded by the base's own reader, which
        decodes its next chunks meanwhile)."""
        if self._base is None:
            raise OSError(f"the object {self._digest} has a delta chunk but no base")
        if self._base_handle is None:
            self._base_handle = open_stored(self._open, self._base, self._size, planes=True)
        if isinstance(self._base_handle, Framed):
            if self._base_handle._chunk != self._chunk:
                raise OSError(f"the base {self._base} is cut in chunks of another size")
            return self._base_handle.planes(index)
        self._base_handle.seek(index * self._chunk)
        return _split(_read_exact(self._base_handle, length, f"the base {self._base}"), self._width)

    def close(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        self._handle.close()
        if self._base_handle is not None:
            self._base_handle.close()
        super().close()


def _decode_chunk(
    kind: int, body: bytes, base: Planes | None, width: int, length: int, planes: bool
) -> Chunk | Planes:
    """One chunk's raw bytes (its planes if `planes`) from its stored body and, for a delta,
    the base's planes."""
    if kind == RAW:
        if len(body) != length:
            raise OSError(f"a stored chunk holds {len(body)} bytes, not {length}")
        return _split(body, width) if planes else body
    own = _unbody(body, width, length)
    if kind == XOR:
        if base is None or len(base.planes) != width or len(base.tail) != len(own.tail):
            raise OSError("a delta chunk's base does not match it")
        own = Planes(
            [np.bitwise_xor(a, b) for a, b in zip(own.planes, base.planes, strict=True)],
            _xor(own.tail, base.tail).tobytes(),
        )
    return own if planes else _interleaved(own, width, length)
