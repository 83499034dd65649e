"""An archive as its skeleton plus one object per distinct tensor payload, and back.

The archives the registry serves are written by our writer with every member stored (not
deflated), so a tensor payload is one contiguous span of the archive: the zip's local header
gives where it starts. Every member larger than 4 KiB (tensor payloads, and the documents and
configs too) is an object; the skeleton is everything else (headers, the central directory and
the members of 4 KiB or less, tiny tensors such as a 1024-float bias included), concatenated.
Tiny tensors are thus stored again with each version's skeleton rather than once: as objects
each would cost a file and its fsyncs (or a request) at every push and pull, more than its
bytes. The holes list each payload's offset in the archive, its length and its sha256. A
payload shared by versions or models (a base model's unchanged layers) is stored once.
Rebuilding interleaves skeleton bytes and payload objects; a read at any offset finds its
segment by bisection and reads only the objects it covers. Against an object store, a reader
opens the next few payloads ahead of the read (their requests answered while the current one
streams); their bodies stream only when the read gets there.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import mmap
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from app.archive import open_archive
from app.registry.blobs import Staged
from app.registry.blobs.base import Reader
from app.registry.encoding import open_stored
from app.settings import Limits
from schema import SymIntAsInt
from schema.dtypes import ITEMSIZE

_CHUNK = 1 << 20
#: a rebuilt archive holds its skeleton in memory up to this size
_HELD = 1 << 20
#: members larger than this are objects of their own: a skeleton differs between versions
#: (each local header holds its member's CRC), so it holds only headers and tiny members, not a
#: model's document or weights again each time
_OWN_OBJECT = 4096


@dataclass(frozen=True)
class Hole:
    """A tensor payload: its offset in the archive, its length, its object's digest."""

    offset: int
    size: int
    digest: str


@dataclass(frozen=True)
class Layout:
    """How to rebuild an archive: its size, its skeleton's digest and its holes in order."""

    size: int
    skeleton: str
    holes: tuple[Hole, ...]

    def to_json(self) -> list[list[Any]]:
        """The holes as a JSON value (the other fields have columns of their own)."""
        return [[h.offset, h.size, h.digest] for h in self.holes]

    @classmethod
    def of(cls, size: int, skeleton: str, holes: list[list[Any]]) -> Layout:
        """A layout from its stored columns."""
        return cls(size, skeleton, tuple(Hole(int(o), int(n), str(d)) for o, n, d in holes))

    def objects(self) -> set[str]:
        """Every object the archive is made of."""
        return {self.skeleton, *(h.digest for h in self.holes)}


@dataclass(frozen=True)
class Tensor:
    """What a payload holds, where it is a raw tensor's storage: the tensor's name, dtype and
    shape (what a delta's base must share) and its elements' width in bytes."""

    name: str
    dtype: int
    shape: tuple[int, ...]
    width: int

    def to_json(self) -> list[Any]:
        """The tensor as a JSON value."""
        return [self.name, self.dtype, list(self.shape), self.width]

    @classmethod
    def of(cls, value: list[Any]) -> Tensor:
        """A tensor from its JSON value."""
        name, dtype, shape, width = value
        return cls(str(name), int(dtype), tuple(int(s) for s in shape), int(width))


@dataclass(frozen=True)
class Payload:
    """A member large enough to be an object of its own: its span of the archive, and the
    tensor it holds (None for a document, a config, a pickle)."""

    offset: int
    size: int
    tensor: Tensor | None


def payloads(archive: Path, limits: Limits) -> list[Payload]:
    """The archive's payloads, in order: each member large enough to be an object of its own
    (all stored, not deflated), with the raw tensor it holds (by its name, the first of those
    sharing it)."""
    with open_archive(archive, limits) as opened:
        held: dict[str, Tensor] = {}
        for entry in sorted(opened.tensors.values(), key=lambda e: e.name):
            meta = entry.meta
            if entry.use_pickle or meta is None or entry.member in held:
                continue
            width = ITEMSIZE.get(meta.dtype)
            shape = [s.as_int for s in meta.sizes if isinstance(s, SymIntAsInt)]
            if width and len(shape) == len(meta.sizes):
                held[entry.member] = Tensor(entry.name, int(meta.dtype), tuple(shape), width)
        return sorted(
            (
                Payload(m.data_offset, m.size, held.get(name))
                for name, m in opened.reader.members.items()
                if m.method == 0 and m.size > _OWN_OBJECT
            ),
            key=lambda p: p.offset,
        )


def cut(
    archive: Path,
    spans: list[tuple[int, int]],
    skeleton: Staged,
    hashed: Callable[[int], str | None] = lambda index: None,
) -> Layout:
    """Write everything between the payload spans of the finished staged archive to `skeleton`
    (finished here); the layout. A payload's digest is `hashed(i)` for the i-th span when what
    readied it hashed it on the way, else it is hashed here: the archive is mapped, not read, so
    each payload is hashed where the page cache holds it (the GIL released meanwhile, while
    other threads upload the same bytes)."""
    holes: list[Hole] = []
    with archive.open("rb") as source, mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ) as m:
        with memoryview(m) as view:
            at = 0
            for index, (offset, length) in enumerate(spans):
                if offset < at or offset + length > len(view):
                    raise OSError("the staged archive's payloads overlap or pass its end")
                skeleton.write(view[at:offset])
                digest = hashed(index)
                if digest is None:
                    digest = hashlib.sha256(view[offset : offset + length]).hexdigest()
                holes.append(Hole(offset, length, digest))
                at = offset + length
            skeleton.write(view[at:])
        size = len(m)
    return Layout(size, skeleton.finish(), tuple(holes))


class Rebuilt(Reader):
    """The archive a layout describes, readable and seekable, opening objects as reads reach
    them (`open` gives an object's seekable reader, as stored: a payload stored encoded is
    decoded here), and the next `ahead` payloads before."""

    def __init__(
        self, layout: Layout, open_object: Callable[[str], BinaryIO], ahead: int = 0
    ) -> None:
        super().__init__(layout.size)
        sizes = {h.digest: h.size for h in layout.holes}
        sizes[layout.skeleton] = layout.size - sum(h.size for h in layout.holes)
        self._open: Callable[[str], BinaryIO] = lambda digest: open_stored(
            open_object, digest, sizes[digest]
        )
        # segments: (archive start, archive end, object digest, offset in the object)
        self._segments: list[tuple[int, int, str, int]] = []
        at = skel = 0
        for hole in layout.holes:
            if hole.offset > at:
                self._segments.append((at, hole.offset, layout.skeleton, skel))
                skel += hole.offset - at
            self._segments.append((hole.offset, hole.offset + hole.size, hole.digest, 0))
            at = hole.offset + hole.size
        if layout.size > at:
            self._segments.append((at, layout.size, layout.skeleton, skel))
        self._starts = [s[0] for s in self._segments]
        self._skeleton = layout.skeleton
        # opened now: an archive gc took fails before an answer starts, not in its middle
        self._handles: dict[str, BinaryIO] = {layout.skeleton: self._open(layout.skeleton)}
        #: the whole skeleton when it is small: its pieces between payloads are mostly a few
        #: dozen bytes, each a read of its own (a system call, or a request) otherwise
        self._held: bytes | None = None
        if skel + layout.size - at <= _HELD:
            with self._handles.pop(layout.skeleton) as handle:
                self._held = handle.read()
        self._ahead = ahead
        self._pool = ThreadPoolExecutor(ahead, "rebuilt") if ahead else None
        self._opening: dict[str, Future[BinaryIO]] = {}
        #: the position of each open handle
        self._at: dict[str, int] = {}

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        # across segments until the buffer is full: a short read would make the buffered
        # reader above fill its own buffer and copy the rest of the caller's read again
        while done < len(view) and self._pos < self._size:
            done += self._read_segment(view[done:])
        return done

    def _read_segment(self, view: memoryview) -> int:
        """Read into `view` from the segment holding the position, up to its end."""
        index = bisect.bisect_right(self._starts, self._pos) - 1
        start, end, digest, inner = self._segments[index]
        want = min(len(view), end - self._pos)
        at = inner + self._pos - start
        if digest == self._skeleton and self._held is not None:
            if at + want > len(self._held):
                raise OSError(f"the skeleton {digest} is shorter than the archive's layout says")
            view[:want] = self._held[at : at + want]
            self._pos += want
            return want
        handle = self._handle(digest, index)
        # where each handle stands is known here (only this reader moves them): an unbuffered
        # file's tell would be a system call per read
        if self._at.get(digest) != at:
            handle.seek(at)
        # straight into the caller's buffer: a pull copies each byte once here
        got = handle.readinto(view[:want])  # type: ignore[attr-defined]
        if got != want:
            raise OSError(f"the object {digest} is shorter than the archive's layout says")
        self._at[digest] = at + want
        self._pos += want
        return want

    def _handle(self, digest: str, index: int) -> BinaryIO:
        """The object's reader; one payload is kept open at a time, and the skeleton."""
        handle = self._handles.get(digest)
        if handle is None:
            for other in [d for d in self._handles if d != self._skeleton]:
                self._handles.pop(other).close()
                self._at.pop(other, None)
            opening = self._opening.pop(digest, None)
            handle = self._open(digest) if opening is None else opening.result()
            self._handles[digest] = handle
            self._at[digest] = 0  # an object opens at its start (ahead or not): no seek there
            self._read_ahead(index)
        return handle

    def _read_ahead(self, index: int) -> None:
        """Open the `ahead` payloads after segment `index`; drop those opened for elsewhere."""
        if self._pool is None:
            return
        wanted: list[str] = []
        for _, _, digest, _ in self._segments[index + 1 :]:
            if len(wanted) == self._ahead:
                break
            if digest not in self._handles and digest != self._skeleton and digest not in wanted:
                wanted.append(digest)
        for digest in [d for d in self._opening if d not in wanted]:
            _dispose(self._opening.pop(digest))
        for digest in wanted:
            if digest not in self._opening:
                # only opened: the body streams into the caller's buffer when the read gets
                # there (read ahead into bytes of its own, each byte would be copied twice)
                self._opening[digest] = self._pool.submit(self._open, digest)

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        for opening in self._opening.values():
            _dispose(opening)
        self._opening.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        super().close()


def _dispose(opening: Future[BinaryIO]) -> None:
    """Close an object opened ahead, once it is open (a failed open has nothing to close)."""

    def close(done: Future[BinaryIO]) -> None:
        if not done.cancelled() and done.exception() is None:
            done.result().close()

    if not opening.cancel():
        opening.add_done_callback(close)


def rebuilt(layout: Layout, open_object: Callable[[str], BinaryIO], ahead: int = 0) -> BinaryIO:
    """The rebuilt archive as a buffered binary file (`ahead`: payloads opened in advance)."""
    raw = Rebuilt(layout, open_object, ahead)
    return cast(BinaryIO, io.BufferedReader(raw, buffer_size=_CHUNK))
