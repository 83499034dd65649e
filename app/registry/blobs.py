"""A content-addressed blob store: files named by their sha256, written once, never changed.

Layout under the data directory:

- ``blobs/<first two hex digits>/<sha256 hex>``: a blob, complete and fsynced;
- ``tmp/<owner>/``: files being received by one live process, which holds an exclusive
  ``flock`` on ``tmp/<owner>/.lock`` for as long as it runs.

A blob reaches ``blobs/`` by `rename` from the same filesystem after its bytes were fsynced, and
the directory is fsynced after the rename, so a blob is either absent or whole after a crash.
A crashed process's lock is released by the kernel, which is how a sweep tells its leftovers from
a live process's uploads, across processes sharing one data directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_DIGEST = re.compile(r"[0-9a-f]{64}")
_LOCK = ".lock"
_CLAIMING = ".claiming-"
#: a directory still being claimed this long after its creation was left by a crash.
_CLAIM_GRACE_S = 600.0


def is_digest(text: str) -> bool:
    """Whether `text` is a lowercase sha256 hex digest."""
    return _DIGEST.fullmatch(text) is not None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Staged:
    """A file being received into the store, hashed as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        self._hash = hashlib.sha256()
        self._file: BinaryIO | None = path.open("xb")
        self._digest: str | None = None

    def write(self, data: bytes) -> None:
        """Append bytes."""
        assert self._file is not None, "the staged file is finished"
        self._file.write(data)
        self._hash.update(data)
        self.size += len(data)

    def flush(self) -> None:
        """Hand buffered bytes to the operating system (finish makes them durable)."""
        assert self._file is not None, "the staged file is finished"
        self._file.flush()

    def finish(self) -> str:
        """Flush and fsync the bytes; the sha256 hex of everything written."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
            self._digest = self._hash.hexdigest()
        assert self._digest is not None
        return self._digest

    @property
    def digest(self) -> str:
        """The sha256 hex of the finished file."""
        assert self._digest is not None, "finish() the staged file first"
        return self._digest

    def head(self, n: int) -> bytes:
        """The first `n` bytes written."""
        with self.path.open("rb") as f:
            return f.read(n)

    def discard(self) -> None:
        """Remove the file if it is still staged (a no-op once placed)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self.path.unlink(missing_ok=True)


class BlobStore:
    """Blobs under ``<root>/blobs``; this process's staged files under ``<root>/tmp/<owner>``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blob_dir = root / "blobs"
        self.tmp_dir = root / "tmp"
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.owner, self._lock_fd = self._claim()

    def _claim(self) -> tuple[Path, int]:
        """A staging directory of this process, locked before it gets its final name."""
        name = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        claiming = self.tmp_dir / f"{_CLAIMING}{name}"
        claiming.mkdir()
        fd = os.open(claiming / _LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        owner = self.tmp_dir / name
        claiming.rename(owner)
        return owner, fd

    def close(self) -> None:
        """Remove this process's staging directory and release its lock."""
        if self._lock_fd >= 0:
            shutil.rmtree(self.owner, ignore_errors=True)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def stage(self) -> Staged:
        """A new empty file in this process's staging directory."""
        return Staged(self.owner / f"blob-{secrets.token_hex(8)}")

    def stage_bytes(self, data: bytes) -> Staged:
        """Bytes staged and fsynced."""
        staged = self.stage()
        try:
            staged.write(data)
            staged.finish()
        except BaseException:
            staged.discard()
            raise
        return staged

    def path(self, digest: str) -> Path:
        """Where the blob `digest` lives (whether or not it exists)."""
        return self.blob_dir / digest[:2] / digest

    def exists(self, digest: str) -> bool:
        """Whether the blob is stored."""
        return self.path(digest).is_file()

    def place(self, staged: Staged) -> str:
        """Move a finished staged file to its blob path (or drop it if the blob exists)."""
        digest = staged.finish()
        target = self.path(digest)
        if target.is_file():
            staged.discard()
            return digest
        folder = target.parent
        if not folder.is_dir():
            folder.mkdir(exist_ok=True)
            _fsync_dir(self.blob_dir)
        os.replace(staged.path, target)
        _fsync_dir(folder)
        return digest

    def open(self, digest: str) -> BinaryIO:
        """The blob for reading (FileNotFoundError if it is not stored)."""
        return self.path(digest).open("rb")

    def digests(self) -> Iterator[str]:
        """Every stored blob's digest."""
        for folder in sorted(self.blob_dir.iterdir()):
            if folder.is_dir():
                for path in sorted(folder.iterdir()):
                    if is_digest(path.name) and path.name[:2] == folder.name:
                        yield path.name

    def strays(self) -> list[Path]:
        """Files and folders under ``blobs/`` that are not blobs (nothing of ours writes them)."""
        found: list[Path] = []
        for folder in sorted(self.blob_dir.iterdir()):
            if not (folder.is_dir() and re.fullmatch(r"[0-9a-f]{2}", folder.name)):
                found.append(folder)
                continue
            found += [
                p
                for p in sorted(folder.iterdir())
                if not (is_digest(p.name) and p.name[:2] == folder.name and p.is_file())
            ]
        return found

    def remove(self, digest: str) -> None:
        """Delete a blob (callers hold the registry's blob lock exclusively)."""
        path = self.path(digest)
        path.unlink(missing_ok=True)
        _fsync_dir(path.parent)

    def remove_path(self, path: Path) -> None:
        """Delete a stray file or folder under ``blobs/``."""
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    def sweep(self) -> list[str]:
        """Remove the staging directories of processes that are gone; their names."""
        removed: list[str] = []
        for entry in sorted(self.tmp_dir.iterdir()):
            if entry == self.owner:
                continue
            if entry.name.startswith(_CLAIMING):
                if time.time() - entry.stat().st_mtime > _CLAIM_GRACE_S:
                    shutil.rmtree(entry, ignore_errors=True)
                    removed.append(entry.name)
                continue
            if not entry.is_dir() or entry.is_symlink():
                entry.unlink(missing_ok=True)
                removed.append(entry.name)
            elif self._abandoned(entry):
                removed.append(entry.name)
        return removed

    def _abandoned(self, folder: Path) -> bool:
        """Remove `folder` if no live process holds its lock; whether it was removed."""
        try:
            fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            # a sweep elsewhere removed the lock first and is removing the rest
            shutil.rmtree(folder, ignore_errors=True)
            return True
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            shutil.rmtree(folder, ignore_errors=True)
            return True
        finally:
            os.close(fd)
