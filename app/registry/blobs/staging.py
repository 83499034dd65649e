"""Local staging of files on their way into the blob store, hashed as they are written.

``<data_dir>/tmp/<owner>/`` holds the files being received by one live process, which holds an
exclusive ``flock`` on ``tmp/<owner>/.lock`` for as long as it runs. A crashed process's lock is
released by the kernel, which is how a sweep tells its leftovers from a live process's uploads,
across processes sharing one data directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
import socket
import time
from pathlib import Path
from typing import BinaryIO

_LOCK = ".lock"
_CLAIMING = ".claiming-"
#: a directory still being claimed this long after its creation was left by a crash.
_CLAIM_GRACE_S = 600.0


class Staged:
    """A file being received into the store, hashed as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        self._hash = hashlib.sha256()
        self._file: BinaryIO | None = path.open("xb")
        self._digest: str | None = None

    def write(self, data: bytes | memoryview) -> None:
        """Append bytes."""
        assert self._file is not None, "the staged file is finished"
        self._file.write(data)
        self._hash.update(data)
        self.size += len(data)

    def flush(self) -> None:
        """Hand buffered bytes to the operating system."""
        assert self._file is not None, "the staged file is finished"
        self._file.flush()

    def finish(self) -> str:
        """Close the file; the sha256 hex of everything written.

        Not fsynced: a staged file is thrown away after a crash, and the backend that stores it
        makes its own copy durable (a local store fsyncs it, many at once, before linking it)."""
        if self._file is not None:
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


class Staging:
    """This process's staging directory ``<root>/tmp/<owner>``, where uploads are received and
    archives written before their objects go to the blob store (of either backend)."""

    def __init__(self, root: Path) -> None:
        self.tmp_dir = root / "tmp"
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
        return Staged(self.fresh())

    def fresh(self) -> Path:
        """A name for a new file in this process's staging directory (nothing is created)."""
        return self.owner / f"blob-{secrets.token_hex(8)}"

    def stage_bytes(self, data: bytes) -> Staged:
        """Bytes staged and finished."""
        staged = self.stage()
        try:
            staged.write(data)
            staged.finish()
        except BaseException:
            staged.discard()
            raise
        return staged

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
