"""The file a torch job writes its .pt2 into: made durable as it is written, not all at the end.

The caller hands the job a temporary path of its own (the CLI renames it over the output, the
service answers with it and removes it), so the job writes that file in place. It is fsynced
before the job reports success, as every file we write is; but it asks the kernel to start
writing each few MiB to disk as soon as they are passed (sync_file_range, Linux), so that the
final fsync waits for the last blocks only, while torch builds, rather than for the whole file.
A .pt2 that is sent and removed (the service's answer) is not written whole at all: its tensors
already lie in the upload, so the job writes only the rest, not made durable (an fsync would
make the client wait for a disk write of bytes nobody reads back), and says which runs of the
upload go between (`Splicer`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from app.archive.errors import ArchiveFailure
from app.archive.member_names import show_name
from app.archive.raw import Streamed
from app.archive.writer import Sink
from app.archive.zipdir import STORED, ZipMember

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


#: Where a segment of a spliced .pt2 lies: in the head file the job wrote, or in the archive
#: the tensors came from (the upload, which the service holds until its answer is sent).
HEAD, ARCHIVE = 0, 1
#: (where, offset, length): a run of the .pt2's bytes in one of those two files.
Segment = tuple[int, int, int]
#: The piece of a spliced member read (and CRC-checked by the writer) at a time.
SPLICE_STEP = 4 * 1024 * 1024


class Splicer:
    """A .pt2 written as segments: what the writer makes (headers, documents, configs) goes to
    the head file, while a stored member of the source archive is read once, for the writer's
    size and CRC check, and kept as the range of the archive it lies in rather than copied.

    The service answers with the segments in order: a 350 MB program's tensors are then never
    written a second time, nor read back from that copy.
    """

    def __init__(self, head: Sink, archive: Path | None) -> None:
        self.segments: list[Segment] = []
        self._head = head
        self._head_size = 0
        self._archive = archive
        #: the chunk the writer is about to pass (it writes each one as soon as it has it)
        self._pending: tuple[bytes, int] | None = None
        #: the spliced member whose last chunk was just passed (the writer checks it then)
        self._ended: ZipMember | None = None

    def streamed(self, member: ZipMember) -> Streamed | None:
        """A stored member of the archive as the writer streams it, spliced (None for any other
        member: the writer copies those)."""
        if self._archive is None or member.method != STORED:
            return None
        return Streamed(member.size, member.crc, partial(self._chunks, member))

    def _chunks(self, member: ZipMember) -> Iterator[bytes]:
        assert self._archive is not None
        with self._archive.open("rb", buffering=0) as file:
            done = 0
            while done < member.size:
                step = min(SPLICE_STEP, member.size - done)
                chunk = os.pread(file.fileno(), step, member.data_offset + done)
                if not chunk:
                    raise ArchiveFailure(
                        "archive-size-mismatch",
                        f"member {show_name(member.name)} has {done} bytes, declares {member.size}",
                    )
                self._pending = (chunk, member.data_offset + done)
                yield chunk
                done += len(chunk)
        self._ended = member

    def refusal(self, failure: ArchiveFailure) -> ArchiveFailure:
        """A failure of the writer as the archive reader words it: a spliced member that came
        whole and was refused straight after (the writer checks its CRC-32 then, and the
        member's size is known right) does not have the CRC-32 it declares."""
        member = self._ended
        if failure.code != "archive-write-refused" or member is None:
            return failure
        return ArchiveFailure(
            "archive-crc-mismatch",
            f"member {show_name(member.name)} does not have the CRC-32 it declares "
            f"({member.crc:08x})",
        )

    def write(self, data: bytes, /) -> int:
        """A chunk just read from the archive is kept as its range there; anything else goes
        to the head file."""
        pending, self._pending, self._ended = self._pending, None, None
        if pending is not None and data is pending[0]:
            self._add(ARCHIVE, pending[1], len(data))
        else:
            self._head.write(data)
            self._add(HEAD, self._head_size, len(data))
            self._head_size += len(data)
        return len(data)

    def _add(self, where: int, offset: int, length: int) -> None:
        if not length:
            return
        if self.segments:
            last_where, last_offset, last_length = self.segments[-1]
            if last_where == where and last_offset + last_length == offset:
                self.segments[-1] = (where, last_offset, last_length + length)
                return
        self.segments.append((where, offset, length))

    def flush(self) -> None:
        """Push the head's buffered bytes to the kernel."""
        self._head.flush()
