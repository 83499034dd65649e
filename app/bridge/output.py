"""The file a torch job writes its .pt2 into: made durable as it is written, not all at the end.

The caller hands the job a temporary path of its own (the CLI renames it over the output, the
service answers with it and removes it), so the job writes that file in place. It is fsynced
before the job reports success, as every file we write is; but it asks the kernel to start
writing each few MiB to disk as soon as they are passed (sync_file_range, Linux), so that the
final fsync waits for the last blocks only, while torch builds, rather than for the whole file.
A file that is sent and removed (the service's response body) is not made durable at all: its
fsync would make the client wait for a disk write of bytes nobody reads back.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

#: How much is written before the kernel is asked to start writing it to disk.
WRITEBACK_STEP = 32 * 1024 * 1024
#: sync_file_range(2)'s flag: start writing the range's dirty pages, do not wait for them.
_SYNC_FILE_RANGE_WRITE = 2


def _sync_file_range() -> Any:
    """libc's sync_file_range, where there is one (None elsewhere)."""
    name = ctypes.util.find_library("c")
    function = getattr(ctypes.CDLL(name, use_errno=True), "sync_file_range", None) if name else None
    if function is not None:
        function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
        function.restype = ctypes.c_int
    return function


_START_WRITEBACK = _sync_file_range()


class EagerFile:
    """A binary file written in order whose bytes start for the disk every `step` bytes."""

    def __init__(self, file: BinaryIO, step: int = WRITEBACK_STEP) -> None:
        self._file = file
        self._step = step
        self._written = 0
        self._started = 0

    def write(self, data: bytes, /) -> int:
        """Append bytes; past each step, start writing what came before to disk."""
        count = self._file.write(data)
        self._written += count
        if _START_WRITEBACK is not None and self._written - self._started >= self._step:
            self._file.flush()
            _START_WRITEBACK(
                self._file.fileno(),
                self._started,
                self._written - self._started,
                _SYNC_FILE_RANGE_WRITE,
            )
            self._started = self._written
        return count

    def flush(self) -> None:
        """Push buffered bytes to the kernel."""
        self._file.flush()


@contextmanager
def durable(
    target: Path, step: int = WRITEBACK_STEP, *, keep: bool = True
) -> Iterator[EagerFile | BinaryIO]:
    """`target` opened for writing in place, fsynced when the block ends if it is to be `keep`t
    (a passing file is written plainly); removed if it raises."""
    try:
        with target.open("wb") as file:
            yield EagerFile(file, step) if keep else file
            file.flush()
            if keep:
                os.fsync(file.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            target.unlink()
        raise
