"""What a blob store backend is: immutable objects named by the sha256 of their bytes."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

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
class Upload:
    """An upload begun and not finished (an object store's multipart upload): the key it
    writes, its id and when it began (epoch s)."""

    key: str
    upload_id: str
    started: float


class Objects(Protocol):
    """A backend: objects are written whole (never visible half-written) and never changed."""

    #: where the objects are, for messages (a directory or an s3:// URL)
    location: str
    #: how many `put`s one push runs at once
    parallel: int
    #: how many objects a pull opens ahead of its read (0: opening one costs nothing)
    read_ahead: int

    def exists(self, digest: str) -> bool:
        """Whether the object is stored."""
        ...

    def settle(self, source: Path) -> None:
        """Ready a staged file for a later `put`, ahead of it and from any thread (a local
        store fsyncs it, which `put` needs before linking it; an object store does nothing)."""
        ...

    def put(self, source: Path, digest: str) -> None:
        """Store the file `source` (whose sha256 is `digest`) as that object, streamed."""
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

    def unfinished(self) -> list[Upload]:
        """Uploads begun under the store's area and neither completed nor aborted."""
        ...

    def abort(self, upload: Upload) -> None:
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
