"""The local directory backend: ``<root>/<first two hex digits>/<sha256 hex>``.

An object reaches its path by `link` or `rename` from the same filesystem after its bytes were
fsynced, and the directory is fsynced after that, so an object is either absent or whole after a
crash. Several processes (replicas on one machine, or on a shared filesystem) may share it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

from app.registry.blobs.base import Listed, PendingUpload, Piece, is_digest

_TEMP = ".copying-"
#: a copy into the store still unfinished this long after it started was left by a crash.
_COPY_GRACE_S = 3600.0
#: fsyncs one push runs at once: each waits on the disk with the GIL released, and the
#: filesystem's journal commits the concurrent ones together
_PARALLEL = 16
_CHUNK = 1 << 20


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_range(source: int, target: int, offset: int, size: int) -> None:
    """Append `size` bytes of the file `source` from `offset` to the file `target`, copied by
    the kernel (no pass through this process's memory, and the GIL released meanwhile)."""
    done = 0
    while done < size:
        try:
            got = os.copy_file_range(source, target, size - done, offset + done)
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            got = _write_range(source, target, offset + done, min(size - done, _CHUNK))
        if got == 0:
            raise OSError(f"the file ended {size - done} bytes early")
        done += got


def _write_range(source: int, target: int, offset: int, size: int) -> int:
    """One chunk through this process, where the kernel cannot copy between the two files."""
    data = os.pread(source, size, offset)
    view = memoryview(data)
    while view:
        view = view[os.write(target, view) :]
    return len(data)


def _copying(path: Path) -> bool:
    """Whether `path` is a copy another process may still be making."""
    if not path.name.startswith(_TEMP):
        return False
    try:
        return time.time() - path.stat().st_mtime < _COPY_GRACE_S
    except FileNotFoundError:
        return True


class LocalObjects:
    """Objects as files under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)
        self.parallel = _PARALLEL
        #: opening a file costs nothing, but opening an encoded object starts its decoding
        self.read_ahead = 2
        self._buffers = threading.local()
        root.mkdir(parents=True, exist_ok=True)
        # every folder made once, here: a push into a young store would otherwise make (and
        # fsync the root for) most of its objects' folders one by one
        missing = [root / f"{i:02x}" for i in range(256) if not (root / f"{i:02x}").is_dir()]
        for folder in missing:
            folder.mkdir(exist_ok=True)
        if missing:
            _fsync_dir(root)

    def path(self, digest: str) -> Path:
        """Where the object `digest` lives (whether or not it exists)."""
        return self.root / digest[:2] / digest

    def exists(self, digest: str) -> bool:
        """Whether the object is stored."""
        return self.path(digest).is_file()

    def carve(self, source: Path, offset: int, size: int, into: Path) -> Piece:
        """Copy the bytes into the new file `into`, hashing them on the way, fsync it and link
        it into the store: each object is placed while the others are still being written (a
        push's claim and commit come after, and its commit stores again whatever gc took
        meanwhile, from `into`, which stays until then)."""
        src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
        try:
            dst = os.open(into, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                digest = self._copy_hashed(src, dst, offset, size)
                os.fsync(dst)
            finally:
                os.close(dst)
        finally:
            os.close(src)
        piece = Piece(into, 0, size, durable=True, digest=digest)
        self.put(piece, digest)
        return piece

    def _copy_hashed(self, src: int, dst: int, offset: int, size: int) -> str:
        """Copy `size` bytes of `src` from `offset` to `dst` through this thread's buffer; their
        sha256."""
        # one pass over the bytes, where a kernel copy would leave the hash a second pass, and
        # a payload's unaligned start would leave the copy in small page-cache pages that read
        # slower
        view = self._buffer()
        digest = hashlib.sha256()
        done = 0
        while done < size:
            got = os.preadv(src, [view[: min(len(view), size - done)]], offset + done)
            if got == 0:
                raise OSError(f"the file ended {size - done} bytes early")
            digest.update(view[:got])
            written = 0
            while written < got:
                written += os.write(dst, view[written:got])
            done += got
        return digest.hexdigest()

    def _buffer(self) -> memoryview:
        """This thread's carving buffer (made once per thread: a fresh one faults its pages)."""
        view: memoryview | None = getattr(self._buffers, "view", None)
        if view is None:
            view = self._buffers.view = memoryview(bytearray(_CHUNK))
        return view

    def put(self, piece: Piece, digest: str, replace: bool = False) -> None:
        """Link a piece that is a whole file to the object's path (staging may sit on this
        filesystem), fsynced first; copy it otherwise. An object there already stays, unless
        `replace` and it is not of the piece's size (another form of the same bytes, left by
        a push that failed)."""
        target = self.path(digest)
        if target.is_file() and (not replace or target.stat().st_size == piece.size):
            return
        folder = target.parent
        if not folder.is_dir():
            folder.mkdir(exist_ok=True)
            _fsync_dir(self.root)
        try:
            if not self._link(piece, target, replace):
                self._copy(piece, target)
        except FileExistsError:
            return
        _fsync_dir(folder)

    @staticmethod
    def _link(piece: Piece, target: Path, replace: bool) -> bool:
        """Link a piece that is a whole file, durable first (the link publishes it whole, or
        fails if it is there, unless `replace`: then it is linked beside and renamed over);
        False where it cannot be (a span, another filesystem)."""
        if piece.offset or piece.size != piece.path.stat().st_size:
            return False
        if not piece.durable:
            _fsync_file(piece.path)
        temp = target.parent / f"{_TEMP}{target.name}.{secrets.token_hex(4)}"
        try:
            os.link(piece.path, temp if replace else target)
            if replace:
                os.replace(temp, target)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            return False
        finally:
            if replace:
                temp.unlink(missing_ok=True)
        return True

    def _copy(self, piece: Piece, target: Path) -> None:
        """Copy into a temporary name (across filesystems, or a span), fsync, rename."""
        temp = target.parent / f"{_TEMP}{target.name}.{secrets.token_hex(4)}"
        try:
            with piece.path.open("rb") as src, temp.open("xb") as dst:
                copy_range(src.fileno(), dst.fileno(), piece.offset, piece.size)
                os.fsync(dst.fileno())
            os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)

    def open(self, digest: str) -> BinaryIO:
        """The object for reading (FileNotFoundError if it is not stored)."""
        # unbuffered, the path joined as text: a pull reads straight into its own buffer and
        # opens a hundred objects, where a Python buffer's copies and pathlib's parsing showed
        return cast(BinaryIO, open(f"{self.location}/{digest[:2]}/{digest}", "rb", buffering=0))

    def remove(self, digest: str) -> None:
        """Delete the object."""
        path = self.path(digest)
        path.unlink(missing_ok=True)
        if path.parent.is_dir():
            _fsync_dir(path.parent)

    def listing(self) -> Iterator[Listed]:
        """Every stored object, in digest order."""
        for folder in sorted(self.root.iterdir()):
            if folder.is_dir():
                for path in sorted(folder.iterdir()):
                    if is_digest(path.name) and path.name[:2] == folder.name:
                        try:
                            stat = path.stat()
                        except FileNotFoundError:
                            continue  # collected by gc (another process) since the folder was read
                        yield Listed(path.name, stat.st_size, stat.st_mtime)

    def strays(self) -> list[str]:
        """Files and folders that are not objects, relative to the root."""
        found: list[Path] = []
        for folder in sorted(self.root.iterdir()):
            if not (folder.is_dir() and re.fullmatch(r"[0-9a-f]{2}", folder.name)):
                found.append(folder)
                continue
            found += [
                p
                for p in sorted(folder.iterdir())
                if not (is_digest(p.name) and p.name[:2] == folder.name and p.is_file())
                and not _copying(p)
            ]
        return [p.relative_to(self.root).as_posix() for p in found]

    def remove_stray(self, name: str) -> None:
        """Delete a stray file or folder."""
        path = self.root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    def unfinished(self) -> list[PendingUpload]:
        """None: a copy cut short is a temporary file, a stray once its grace is over."""
        return []

    def abort(self, upload: PendingUpload) -> None:
        """Nothing to abort (`unfinished` lists none)."""
