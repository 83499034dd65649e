"""What a blob store backend is: immutable objects named by the sha256 of their bytes."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol, cast

_DIGEST = re.compile(r"[0-9a-f]{64}")


def is_digest(text: str) -> bool:
    """Whether `text` is a lowercase sha256 hex digest."""
    return _DIGEST.fullmatch(text) is not None


@dataclass(frozen=True)
class Listed:
    """An object found by listing the store: its digest, size and when it was written (epoch s)."""

    digest: str
    size: int
    written: float


@dataclass(frozen=True)
class Piece:
    """The bytes of one object in a local file: `size` bytes from `offset` (a file of its own,
    or a payload's span of a staged archive)."""

    path: Path
    offset: int
    size: int
    #: already fsynced (a local store need not fsync it again before linking it)
    durable: bool = False
    #: the sha256 of its bytes when whoever readied it hashed them on the way (else None)
    digest: str | None = None

    @classmethod
    def whole(cls, path: Path) -> Piece:
        """All of the file `path`."""
        return cls(path, 0, path.stat().st_size)


@dataclass(frozen=True)
class PendingUpload:
    """An upload begun and not finished (an object store's multipart upload): the key it
    writes, its id and when it began (epoch s)."""

    key: str
    upload_id: str
    started: float


class Objects(Protocol):
    """A backend: objects are written whole (never visible half-written) and never changed."""

    #: where the objects are, for messages (a directory or an s3:// URL)
    location: str
    #: how many `carve`s and `put`s run at once in a process (its blob store's threads)
    parallel: int
    #: how many objects a pull opens ahead of its read (0: opening one costs nothing)
    read_ahead: int

    def exists(self, digest: str) -> bool:
        """Whether the object is stored."""
        ...

    def carve(self, source: Path, offset: int, size: int, into: Path) -> Piece:
        """Ready `size` bytes of `source` from `offset` for a later `put`, from any thread while
        the skeleton is written: a local store copies them into the new file `into`, hashing
        them on the way (the piece's `digest`), and fsyncs it, so that `put` only links it; an
        object store uploads straight from `source`, so leaves them where they are (a piece
        without a digest is hashed by the caller)."""
        ...

    def put(self, piece: Piece, digest: str, replace: bool = False) -> None:
        """Store the piece's bytes as the object `digest` (the sha256 of its raw bytes: the
        piece's own bytes, or an encoded form of them whose sha256 is the piece's `digest`),
        streamed; `replace`: an object there already may be another form, left by a push that
        failed, and is replaced (unless it has the piece's size: the raw bytes, as the piece)."""
        ...

    def open(self, digest: str) -> BinaryIO:
        """The object for reading, seekable (FileNotFoundError if it is not stored)."""
        ...

    def remove(self, digest: str) -> None:
        """Delete the object (no error if it is gone)."""
        ...

    def listing(self) -> Iterator[Listed]:
        """Every stored object."""
        ...

    def strays(self) -> list[str]:
        """Names under the store's area that are not objects (nothing of ours writes them)."""
        ...

    def remove_stray(self, name: str) -> None:
        """Delete one of `strays`."""
        ...

    def unfinished(self) -> list[PendingUpload]:
        """Uploads begun under the store's area and neither completed nor aborted."""
        ...

    def abort(self, upload: PendingUpload) -> None:
        """Abort one of `unfinished` (its parts are freed; no error if it is gone)."""
        ...


class Reader(io.RawIOBase):
    """A read-only, seekable raw stream of `size` bytes; subclasses give `readinto`."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos


class _Window(Reader):
    """A piece's bytes as a stream of their own (positions relative to the piece)."""

    def __init__(self, piece: Piece) -> None:
        super().__init__(piece.size)
        self._offset = piece.offset
        self._fd = os.open(piece.path, os.O_RDONLY | os.O_CLOEXEC)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._size - self._pos)
        if want <= 0:
            return 0
        got = os.preadv(self._fd, [view[:want]], self._offset + self._pos)
        self._pos += got
        return got

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        super().close()


def open_window(piece: Piece) -> BinaryIO:
    """The piece's bytes, readable and seekable from its first byte to its last."""
    return cast(BinaryIO, io.BufferedReader(_Window(piece), buffer_size=1 << 18))
