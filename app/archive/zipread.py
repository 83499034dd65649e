"""A distrustful zip reader: members by name, inflated only on request after the structural
checks (zipdir) have passed.

Members are inflated only by `iter_member`, in a streaming loop capped at the declared size, with
the size and CRC-32 checked at the end; a member of several blocks is read (and checked) a few
blocks ahead on a helper thread, so the check overlaps the consumer's work (see readahead).
"""

from __future__ import annotations

import zlib
from collections.abc import Generator, Iterator
from pathlib import Path
from types import TracebackType
from typing import Literal

from app.archive.errors import ArchiveFailure
from app.archive.member_names import common_root, show_name
from app.archive.readahead import read_ahead
from app.archive.zipdir import (
    STORED,
    Directory,
    RandomAccess,
    ZipMember,
    ZipSource,
)
from app.settings import Limits, MiB

#: What an uploaded program is: a .pt2 archive, or JSON (a document, or what serialize writes).
Media = Literal["zip", "json"]


def media_of(path: Path) -> Media:
    """A file's media from its first bytes (a .pt2 is a zip; anything else is read as JSON)."""
    with path.open("rb") as f:
        return "zip" if f.read(2) == b"PK" else "json"


_READ_BLOCK = 256 * 1024
#: blocks a member's reader thread may run ahead of the consumer (see readahead).
_READ_AHEAD = 2


class ZipReader:
    """A checked view of a zip archive: members by name, streamed and verified on read."""

    def __init__(
        self, source: ZipSource, limits: Limits | None = None, *, single_root: bool = True
    ) -> None:
        self.limits = limits or Limits()
        self._src = RandomAccess(source)
        try:
            self.members = Directory(self._src, self.limits).members(single_root)
        except BaseException:
            self._src.close()
            raise

    def __enter__(self) -> ZipReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the underlying file if the reader opened it."""
        self._src.close()

    @property
    def names(self) -> list[str]:
        """Member names in central-directory order."""
        return list(self.members)

    def root(self) -> str:
        """The single top-level directory every member lives under (archive-many-roots)."""
        return common_root(self.names)

    def member(self, name: str) -> ZipMember:
        """The member called `name` (archive-missing-member)."""
        try:
            return self.members[name]
        except KeyError:
            raise ArchiveFailure(
                "archive-missing-member", f"no member named {show_name(name)}"
            ) from None

    def iter_member(self, name: str, chunk: int = MiB) -> Generator[bytes, None, None]:
        """Stream a member's bytes in chunks of at most `chunk`; size and CRC checked at the end.

        The last iteration raises on a size or CRC mismatch, so a consumer must exhaust the
        iterator before it trusts what it received. A member of more than one chunk is read
        and checked on a helper thread, ahead of the consumer; closing the generator (or
        dropping it) ends that thread.
        """
        if chunk <= 0:
            raise ValueError("chunk must be positive")
        return self._stream(self.member(name), chunk)

    def read_member(self, name: str, limit: int) -> bytes:
        """A member's verified bytes, refused before reading if it declares more than `limit`."""
        member = self.member(name)
        if member.size > limit:
            raise ArchiveFailure(
                "archive-member-too-large",
                f"member {show_name(name)} declares {member.size} bytes (limit {limit})",
            )
        if member.method == STORED and member.size <= MiB:
            # one block, read and checked without the streaming machinery (markers, configs)
            data = self._src.read_at(member.data_offset, member.size)
            _verify(member, len(data), zlib.crc32(data))
            return data
        return b"".join(self._stream(member, MiB))

    def head(self, name: str, length: int) -> bytes:
        """Up to `length` first bytes of a member, unverified (for sniffing its format)."""
        member = self.member(name)
        length = min(length, member.size)
        if member.method == STORED:
            return self._src.read_at(member.data_offset, length)
        inflater = zlib.decompressobj(-15)
        out = b""
        pos, end = member.data_offset, member.data_offset + member.compressed_size
        pending = b""
        while len(out) < length:
            if not pending:
                if pos >= end:
                    break
                step = min(_READ_BLOCK, end - pos)
                pending = self._src.read_at(pos, step)
                pos += step
            try:
                out += inflater.decompress(pending, length - len(out))
            except zlib.error as exc:
                raise ArchiveFailure(
                    "archive-bad-deflate", f"member {show_name(name)}: {exc}"
                ) from None
            if inflater.eof:
                break
            pending = inflater.unconsumed_tail
        return out

    def tail(self, name: str, length: int) -> bytes | None:
        """Up to `length` last bytes of a stored member; None for a deflated one."""
        member = self.member(name)
        if member.method != STORED:
            return None
        length = min(length, member.size)
        return self._src.read_at(member.data_offset + member.size - length, length)

    # -- streaming --------------------------------------------------------------------------

    def _stream(self, member: ZipMember, chunk: int) -> Generator[bytes, None, None]:
        checked = self._checked(member, chunk)
        # One block has nothing to overlap with; a helper thread would only cost its start.
        return checked if member.size <= chunk else read_ahead(checked, _READ_AHEAD)

    def _checked(self, member: ZipMember, chunk: int) -> Generator[bytes, None, None]:
        blocks = (
            self._stored(member, chunk) if member.method == STORED else self._inflate(member, chunk)
        )
        crc = 0
        produced = 0
        for block in blocks:
            crc = zlib.crc32(block, crc)
            produced += len(block)
            yield block
        _verify(member, produced, crc)

    def _stored(self, member: ZipMember, chunk: int) -> Iterator[bytes]:
        pos, end = member.data_offset, member.data_offset + member.size
        while pos < end:
            step = min(chunk, end - pos)
            yield self._src.read_at(pos, step)
            pos += step

    def _inflate(self, member: ZipMember, chunk: int) -> Iterator[bytes]:
        inflater = zlib.decompressobj(-15)
        pos, end = member.data_offset, member.data_offset + member.compressed_size
        produced = 0
        pending = b""
        while True:
            if not pending and pos < end:
                step = min(_READ_BLOCK, end - pos)
                pending = self._src.read_at(pos, step)
                pos += step
            # At most one byte past the declared size is ever produced: enough to detect a lie.
            cap = max(1, min(chunk, member.size - produced + 1))
            try:
                out = inflater.decompress(pending, cap)
            except zlib.error as exc:
                raise ArchiveFailure(
                    "archive-bad-deflate", f"member {show_name(member.name)}: {exc}"
                ) from None
            progressed = bool(out) or len(inflater.unconsumed_tail) != len(pending)
            pending = inflater.unconsumed_tail
            if out:
                produced += len(out)
                if produced > member.size:
                    raise ArchiveFailure(
                        "archive-size-mismatch",
                        f"member {show_name(member.name)} inflates past its declared "
                        f"{member.size} bytes",
                    )
                yield out
                continue
            if inflater.eof or (not pending and pos >= end):
                break
            if not progressed:
                raise ArchiveFailure(
                    "archive-bad-deflate", f"member {show_name(member.name)}: inflation stalled"
                )
        if not inflater.eof:
            raise ArchiveFailure(
                "archive-size-mismatch",
                f"member {show_name(member.name)}: "
                "its compressed data ends inside the deflate stream",
            )
        if pending or inflater.unused_data or pos < end:
            raise ArchiveFailure(
                "archive-size-mismatch",
                f"member {show_name(member.name)}: the deflate stream ends before its declared "
                f"{member.compressed_size} compressed bytes",
            )


def _verify(member: ZipMember, produced: int, crc: int) -> None:
    """A member's bytes, all read, against the size and CRC-32 its directory entry declares."""
    if produced != member.size:
        raise ArchiveFailure(
            "archive-size-mismatch",
            f"member {show_name(member.name)} has {produced} bytes, declares {member.size}",
        )
    if crc != member.crc:
        raise ArchiveFailure(
            "archive-crc-mismatch",
            f"member {show_name(member.name)} has CRC-32 {crc:08x}, declares {member.crc:08x}",
        )


def json_members_bytes(archive: ZipSource, limits: Limits) -> int:
    """The uncompressed sizes an archive's zip directory declares for its .json members (its
    documents' bytes, nothing decompressed); Failure or OSError where it cannot be read."""
    with ZipReader(archive, limits, single_root=False) as reader:
        return sum(m.size for name, m in reader.members.items() if name.endswith(".json"))
