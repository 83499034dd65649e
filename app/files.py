"""Files the CLI and the registry client write: whole or not at all, with the mode `cp` gives."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path


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
