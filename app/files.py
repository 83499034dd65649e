"""Files written whole or not at all (a temporary file beside the target, fsynced, renamed over
it), with the mode `cp` gives: the one way the CLI, the client, the archive writer and the bridge
write a file."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def creation_mode() -> int:
    """The mode a new file gets from open() under this process's umask (0o666 masked)."""
    # The umask can only be read by setting it; the CLI is single-threaded when it writes files.
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _special(target: Path) -> bool:
    """Whether `target` is a device, pipe or socket (`-o /dev/null`), written into, never
    replaced by a rename."""
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def temporary_beside(target: Path) -> tuple[int, Path]:
    """A new hidden file beside `target` (same file system, so the final rename is atomic), open
    for writing, with the mode a plain open() would give rather than mkstemp's 0600."""
    folder = None if _special(target) else target.parent
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=folder)
    os.fchmod(fd, creation_mode())
    return fd, Path(name)


def publish(temp: Path, target: Path) -> None:
    """Rename a finished temporary file over `target`, with the umask's mode whoever wrote it;
    a device or pipe gets the bytes written into it instead."""
    if _special(target):
        with temp.open("rb") as source, target.open("wb") as sink:
            shutil.copyfileobj(source, sink)
        temp.unlink()
        return
    os.chmod(temp, creation_mode())
    os.replace(temp, target)


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A temporary path beside `target` for someone else to write (a worker process); renamed
    over `target` when the block ends, removed if it raises."""
    fd, temp = temporary_beside(target)
    os.close(fd)
    try:
        yield temp
        publish(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    _fsync_directory(target.parent)


@contextmanager
def atomic_writer(target: Path) -> Iterator[BinaryIO]:
    """A binary file to write `target` through: fsynced and renamed over it when the block ends,
    removed if it raises, so readers see the old file or the whole new one."""
    with atomic_path(target) as temp, temp.open("wb") as out:
        yield out
        out.flush()
        os.fsync(out.fileno())


def write_atomic(target: Path, data: bytes) -> None:
    """Write `data` to `target` whole or not at all."""
    with atomic_writer(target) as out:
        out.write(data)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; some platforms and file systems cannot open or sync a
    # directory, which is fine.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
