"""The zip's structure, checked before any member is inflated: end-of-central-directory records
(zip64 included), member count, each central-directory entry (encryption, method, name, file
type, zip64 fields, duplicates, per-member compression ratio), the declared total, the single
root, then every local header and data descriptor against its directory entry, then overlaps
between members.

Ratio rule: a member whose declared uncompressed size is over `RATIO_FLOOR` (1 MiB) is
refused when that size is more than `limits.max_member_ratio` times its compressed size.
Small members are exempt because a highly compressible small member (an all-zero buffer)
is legitimate and cannot amplify much; the floor is on the *uncompressed* size so that a
bomb cannot hide below it by being small when compressed.
"""

from __future__ import annotations

import os
import stat
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from app.archive.errors import ArchiveFailure
from app.archive.member_names import (
    check_name,
    common_root,
    refuse_duplicate,
    refuse_spellings,
    show_name,
)
from app.settings import Limits, MiB

STORED = 0
DEFLATED = 8
RATIO_FLOOR = 1 * MiB

ZipSource = bytes | bytearray | memoryview | str | os.PathLike[str] | BinaryIO

_EOCD = b"PK\x05\x06"
_EOCD64 = b"PK\x06\x06"
_LOCATOR64 = b"PK\x06\x07"
_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"
_DESCRIPTOR = b"PK\x07\x08"

_EOCD_STRUCT = struct.Struct("<4sHHHHIIH")
_EOCD64_STRUCT = struct.Struct("<4sQHHIIQQQQ")
_LOCATOR64_STRUCT = struct.Struct("<4sIQI")
_CENTRAL_STRUCT = struct.Struct("<4sHHHHHHIIIHHHHHII")
_LOCAL_STRUCT = struct.Struct("<4sHHHHHIIIHH")

_MAX_COMMENT = 0xFFFF
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF
_ZIP64_EXTRA = 0x0001
_FLAG_ENCRYPTED = 0x0001
_FLAG_DESCRIPTOR = 0x0008
_FLAG_STRONG_ENCRYPTION = 0x0040
_FLAG_UTF8 = 0x0800
_FLAG_MASKED_HEADERS = 0x2000
_METHOD_AES = 99
#: the central directory may hold at most this many bytes per declared entry (name, extra,
#: comment included); beyond it the directory itself would be a memory hazard.
_MAX_CENTRAL_BYTES_PER_ENTRY = 8 * 1024


@dataclass(frozen=True)
class ZipMember:
    """One member as the central directory declares it, with its checked local layout."""

    name: str
    method: int
    flags: int
    crc: int
    compressed_size: int
    size: int
    header_offset: int
    data_offset: int
    #: end of the member's bytes: data plus any data descriptor.
    end: int
    #: unix file mode from the external attributes (0 when the writer set none).
    mode: int

    @property
    def is_dir(self) -> bool:
        """True for a directory entry (a name ending in '/')."""
        return self.name.endswith("/")


@dataclass
class _Entry:
    name: str
    raw_name: bytes
    method: int
    flags: int
    crc: int
    compressed_size: int
    size: int
    header_offset: int
    mode: int
    zip64: bool


class RandomAccess:
    """Random access to bytes or a seekable file, reading only what is asked for."""

    def __init__(self, source: ZipSource) -> None:
        self._view: memoryview | None = None
        #: the source itself when it is bytes: slicing it copies once, a view's slice twice
        self._bytes: bytes | None = source if isinstance(source, bytes) else None
        self._file: BinaryIO | None = None
        self._owned = False
        self._lock = threading.Lock()
        if isinstance(source, bytes | bytearray | memoryview):
            self._view = memoryview(source).cast("B")
            self.size = len(self._view)
        elif isinstance(source, str | os.PathLike):
            self._file = open(source, "rb")
            self._owned = True
            self.size = self._file.seek(0, os.SEEK_END)
        else:
            self._file = source
            self.size = source.seek(0, os.SEEK_END)

    def read_at(self, offset: int, length: int) -> bytes:
        """Exactly `length` bytes at `offset`, or archive-truncated."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ArchiveFailure(
                "archive-truncated",
                f"the archive ends at byte {self.size}, before {offset + length}",
            )
        if self._bytes is not None:
            return self._bytes[offset : offset + length]
        if self._view is not None:
            return bytes(self._view[offset : offset + length])
        assert self._file is not None
        with self._lock:
            self._file.seek(offset)
            data = self._file.read(length)
        if len(data) != length:
            raise ArchiveFailure("archive-truncated", "the archive file shrank while being read")
        return data

    def close(self) -> None:
        """Release the file if this source opened it."""
        if self._owned and self._file is not None:
            self._file.close()
        self._file = None
        self._view = None
        self._bytes = None


class Directory:
    """The checked members of a zip, parsed from its directory and local headers."""

    def __init__(self, src: RandomAccess, limits: Limits) -> None:
        self._src = src
        self.limits = limits

    def members(self, single_root: bool) -> dict[str, ZipMember]:
        """Every member by name, each checked against the rules above."""
        return self._parse(single_root)

    def _parse(self, single_root: bool) -> dict[str, ZipMember]:
        count, cd_offset, cd_size = self._end_records()
        entries = self._central_directory(count, cd_offset, cd_size)
        total = sum(e.size for e in entries)
        if total > self.limits.max_total_uncompressed:
            raise ArchiveFailure(
                "archive-too-large",
                f"members declare {total} uncompressed bytes in total "
                f"(limit {self.limits.max_total_uncompressed})",
            )
        members = {e.name: self._local(e, cd_offset) for e in entries}
        if single_root:
            common_root(list(members))
        self._refuse_overlaps(list(members.values()))
        return members

    def _end_records(self) -> tuple[int, int, int]:
        """Locate and check the end-of-central-directory record(s): (count, offset, size)."""
        size = self._src.size
        start = max(0, size - (_EOCD_STRUCT.size + _MAX_COMMENT))
        tail = self._src.read_at(start, size - start)
        found = self._find_end_record(tail)
        eocd_at = start + found
        _, disk, cd_disk, disk_count, count, cd_size, cd_offset, _ = _EOCD_STRUCT.unpack_from(
            tail, found
        )
        if disk != 0 or cd_disk != 0 or disk_count != count:
            raise ArchiveFailure("archive-corrupt", "multi-disk zip archives are not supported")
        cd_end = eocd_at
        if eocd_at >= _LOCATOR64_STRUCT.size:
            locator = self._src.read_at(eocd_at - _LOCATOR64_STRUCT.size, _LOCATOR64_STRUCT.size)
            if locator[:4] == _LOCATOR64:
                count, cd_offset, cd_size, cd_end = self._zip64_end(
                    locator, eocd_at - _LOCATOR64_STRUCT.size, count, cd_offset, cd_size
                )
        if count > self.limits.max_members:
            raise ArchiveFailure(
                "archive-too-many-members",
                f"the archive declares {count} members (limit {self.limits.max_members})",
            )
        if cd_offset + cd_size != cd_end:
            raise ArchiveFailure(
                "archive-corrupt",
                f"the central directory ({cd_size} bytes at {cd_offset}) does not end where "
                f"the end record starts ({cd_end})",
            )
        if cd_size < count * _CENTRAL_STRUCT.size:
            raise ArchiveFailure(
                "archive-corrupt", f"{cd_size} central-directory bytes cannot hold {count} entries"
            )
        if cd_size > max(1, count) * _MAX_CENTRAL_BYTES_PER_ENTRY:
            raise ArchiveFailure(
                "archive-corrupt",
                f"the central directory is {cd_size} bytes for {count} entries",
            )
        return count, cd_offset, cd_size

    def _find_end_record(self, tail: bytes) -> int:
        """Where in `tail` (the archive's last bytes) its one end record starts."""
        found = -1
        search_end = len(tail)
        while search_end > 0:
            pos = tail.rfind(_EOCD, 0, search_end)
            if pos < 0:
                break
            if pos + _EOCD_STRUCT.size <= len(tail):
                comment = _EOCD_STRUCT.unpack_from(tail, pos)[7]
                if pos + _EOCD_STRUCT.size + comment == len(tail):
                    found = pos
                    break
            # The next candidate must start before this one.
            search_end = pos + len(_EOCD) - 1
        if found < 0:
            if self._src.read_at(0, min(4, self._src.size)) in (_LOCAL, _EOCD) or _EOCD in tail:
                raise ArchiveFailure(
                    "archive-truncated", "no complete end-of-central-directory record"
                )
            raise ArchiveFailure("archive-not-zip", "the bytes are not a zip archive")
        # torch's zip reader (miniz), like Python's, takes the last end-record signature with a
        # record's length after it: one in our record's comment gives it another directory
        if tail.find(_EOCD, found + 1, len(tail) - _EOCD_STRUCT.size + len(_EOCD)) >= 0:
            raise ArchiveFailure(
                "archive-ambiguous-end",
                "the archive comment holds another end-of-central-directory record",
            )
        return found

    def _zip64_end(
        self, locator: bytes, locator_at: int, count: int, cd_offset: int, cd_size: int
    ) -> tuple[int, int, int, int]:
        _, disk, record_at, disks = _LOCATOR64_STRUCT.unpack(locator)
        if disk != 0 or disks > 1:
            raise ArchiveFailure("archive-corrupt", "multi-disk zip64 archives are not supported")
        if record_at + _EOCD64_STRUCT.size > locator_at:
            raise ArchiveFailure("archive-corrupt", "the zip64 end record is out of place")
        fields = _EOCD64_STRUCT.unpack(self._src.read_at(record_at, _EOCD64_STRUCT.size))
        sig, record_size, _, _, disk, cd_disk, disk_count, count64, size64, offset64 = fields
        if sig != _EOCD64 or record_at + 12 + record_size != locator_at:
            raise ArchiveFailure("archive-corrupt", "bad zip64 end-of-central-directory record")
        if disk != 0 or cd_disk != 0 or disk_count != count64:
            raise ArchiveFailure("archive-corrupt", "multi-disk zip archives are not supported")
        for name, short, long, sentinel in (
            ("member count", count, count64, _U16),
            ("directory size", cd_size, size64, _U32),
            ("directory offset", cd_offset, offset64, _U32),
        ):
            if short != sentinel and short != long:
                raise ArchiveFailure(
                    "archive-corrupt",
                    f"the end records disagree on the {name} ({short} vs zip64 {long})",
                )
        return count64, offset64, size64, record_at

    def _central_directory(self, count: int, cd_offset: int, cd_size: int) -> list[_Entry]:
        data = self._src.read_at(cd_offset, cd_size)
        entries: list[_Entry] = []
        folded: dict[bytes, str] = {}
        texts: dict[str, bytes] = {}
        pos = 0
        for index in range(count):
            if pos + _CENTRAL_STRUCT.size > len(data):
                raise ArchiveFailure(
                    "archive-corrupt", f"central directory entry {index} runs past its end"
                )
            fields = _CENTRAL_STRUCT.unpack_from(data, pos)
            (sig, _, _, flags, method, _, _, crc, csize, usize, name_len, extra_len) = fields[:12]
            comment_len, disk, _, external, offset = fields[12:]
            if sig != _CENTRAL:
                raise ArchiveFailure(
                    "archive-corrupt", f"central directory entry {index} has a bad signature"
                )
            body = pos + _CENTRAL_STRUCT.size
            after = body + name_len + extra_len + comment_len
            if after > len(data):
                raise ArchiveFailure(
                    "archive-corrupt", f"central directory entry {index} runs past its end"
                )
            raw_name = data[body : body + name_len]
            extra = data[body + name_len : body + name_len + extra_len]
            pos = after
            name = _decode_name(raw_name, flags, index)
            if flags & (_FLAG_ENCRYPTED | _FLAG_STRONG_ENCRYPTION | _FLAG_MASKED_HEADERS) or (
                method == _METHOD_AES
            ):
                raise ArchiveFailure("archive-encrypted", f"member {show_name(name)} is encrypted")
            if method not in (STORED, DEFLATED):
                raise ArchiveFailure(
                    "archive-unsupported-compression",
                    f"member {show_name(name)} uses compression method {method} "
                    "(only stored and deflate are read)",
                )
            check_name(name)
            mode = _file_mode(name, external)
            usize, csize, offset, disk, zip64 = _zip64_fields(
                name, extra, usize, csize, offset, disk
            )
            if disk != 0:
                raise ArchiveFailure(
                    "archive-corrupt", f"member {show_name(name)} lives on another disk"
                )
            # torch's zip reader (miniz) looks names up with A-Z folded to a-z (bytes.lower)
            previous = folded.setdefault(raw_name.lower(), name)
            if previous is not name:
                refuse_duplicate(name, previous)
            # we look members up by their text, torch by their bytes: two spellings of one
            # text (UTF-8 flagged and cp437, say) would be one member to us and two to torch
            if texts.setdefault(name, raw_name) is not raw_name:
                refuse_spellings(name, texts[name], raw_name)
            _check_sizes(name, method, csize, usize, self.limits)
            entries.append(
                _Entry(name, raw_name, method, flags, crc, csize, usize, offset, mode, zip64)
            )
        if pos != len(data):
            raise ArchiveFailure(
                "archive-corrupt",
                f"the central directory has {len(data) - pos} bytes after its {count} entries",
            )
        return entries

    def _local(self, entry: _Entry, cd_offset: int) -> ZipMember:
        """Check an entry's local header (and data descriptor) against its directory entry."""
        if entry.header_offset + _LOCAL_STRUCT.size > cd_offset:
            self._past(entry.header_offset + _LOCAL_STRUCT.size, cd_offset, _where(entry))
        header = self._src.read_at(entry.header_offset, _LOCAL_STRUCT.size)
        sig, _, flags, method, _, _, crc, csize, usize, name_len, extra_len = _LOCAL_STRUCT.unpack(
            header
        )
        if sig != _LOCAL:
            raise ArchiveFailure("archive-header-mismatch", f"{_where(entry)}: no local header")
        body = entry.header_offset + _LOCAL_STRUCT.size
        if body + name_len + extra_len > cd_offset:
            self._past(body + name_len + extra_len, cd_offset, _where(entry))
        tail = self._src.read_at(body, name_len + extra_len)
        if tail[:name_len] != entry.raw_name:
            shown = show_name(tail[:name_len].decode("cp437"))
            raise ArchiveFailure(
                "archive-header-mismatch", f"{_where(entry)}: the local header names {shown}"
            )
        if method != entry.method:
            raise ArchiveFailure(
                "archive-header-mismatch",
                f"{_where(entry)}: compression method {method} locally, {entry.method} in the "
                "directory",
            )
        if (flags ^ entry.flags) & (_FLAG_ENCRYPTED | _FLAG_DESCRIPTOR):
            raise ArchiveFailure(
                "archive-header-mismatch", f"{_where(entry)}: local and directory flags disagree"
            )
        zip64 = entry.zip64
        if csize == _U32 or usize == _U32:
            usize, csize, zip64 = _local_zip64(tail[name_len:], usize, csize, _where(entry))
        described = bool(flags & _FLAG_DESCRIPTOR)
        _same_fields(described, (crc, csize, usize), entry)
        data_offset = body + name_len + extra_len
        end = data_offset + entry.compressed_size
        if end > cd_offset:
            self._past(end, cd_offset, _where(entry))
        if described:
            end += self._descriptor(entry, end, cd_offset, zip64)
        return ZipMember(
            name=entry.name,
            method=entry.method,
            flags=entry.flags,
            crc=entry.crc,
            compressed_size=entry.compressed_size,
            size=entry.size,
            header_offset=entry.header_offset,
            data_offset=data_offset,
            end=end,
            mode=entry.mode,
        )

    def _descriptor(self, entry: _Entry, at: int, limit: int, zip64: bool) -> int:
        """Length of the data descriptor at `at`, checked against the directory entry.

        Its sizes are 8 bytes wide in zip64 archives and 4 otherwise, but writers differ on
        which members get which (torch widens every descriptor after its first zip64 member),
        so both widths are tried, the expected one first.
        """
        expected = (entry.crc, entry.compressed_size, entry.size)
        raw = self._src.read_at(at, min(limit - at, 24))
        has_signature = raw[:4] == _DESCRIPTOR
        for width in (8, 4) if zip64 else (4, 8):
            fmt = "<IQQ" if width == 8 else "<III"
            for skip in (4, 0) if has_signature else (0,):
                length = skip + 4 + 2 * width
                if length <= len(raw) and struct.unpack_from(fmt, raw, skip) == expected:
                    return length
        where = _where(entry)
        if len(raw) < 12:
            raise ArchiveFailure("archive-overlap", f"{where}: no room for its data descriptor")
        raise ArchiveFailure(
            "archive-header-mismatch", f"{where}: the data descriptor disagrees with the directory"
        )

    def _past(self, end: int, cd_offset: int, where: str) -> None:
        if end > self._src.size:
            raise ArchiveFailure("archive-truncated", f"{where} runs past the end of the archive")
        raise ArchiveFailure("archive-overlap", f"{where} runs into the central directory")

    @staticmethod
    def _refuse_overlaps(members: list[ZipMember]) -> None:
        ordered = sorted(members, key=lambda m: m.header_offset)
        for before, after in zip(ordered, ordered[1:], strict=False):
            if after.header_offset < before.end:
                raise ArchiveFailure(
                    "archive-overlap",
                    f"members {show_name(before.name)} (bytes {before.header_offset}-{before.end}) "
                    f"and {show_name(after.name)} (from byte {after.header_offset}) overlap",
                )


def _where(entry: _Entry) -> str:
    return f"member {show_name(entry.name)}"


def _same_fields(described: bool, local: tuple[int, int, int], entry: _Entry) -> None:
    """A local header's CRC-32 and sizes against the directory's."""
    central = (entry.crc, entry.compressed_size, entry.size)
    if local == central or (described and local == (0, 0, 0)):
        return
    for label, mine, theirs in zip(
        ("CRC-32", "compressed size", "size"), local, central, strict=True
    ):
        # With a data descriptor the local fields may be zero; the descriptor has them.
        if mine != theirs and not (described and mine == 0):
            raise ArchiveFailure(
                "archive-header-mismatch",
                f"{_where(entry)}: {label} {mine} locally, {theirs} in the directory",
            )


def _decode_name(raw: bytes, flags: int, index: int) -> str:
    if raw.isascii():
        return raw.decode("ascii")  # the same in UTF-8 and cp437, and far cheaper than cp437
    if flags & _FLAG_UTF8:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ArchiveFailure(
                "archive-bad-name", f"central directory entry {index} has a name that is not UTF-8"
            ) from None
    return raw.decode("cp437")


def _file_mode(name: str, external: int) -> int:
    """The unix mode in the external attributes; refuse symlinks and special files."""
    mode: int = external >> 16
    if not mode:
        return 0
    kind = stat.S_IFMT(mode)
    if kind == stat.S_IFLNK:
        raise ArchiveFailure("archive-symlink", f"member {show_name(name)} is a symbolic link")
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise ArchiveFailure(
            "archive-special-file",
            f"member {show_name(name)} is not a regular file (mode {mode:o})",
        )
    return mode


def _extras(name: str, extra: bytes) -> Iterator[tuple[int, bytes]]:
    pos = 0
    while pos < len(extra):
        if pos + 4 > len(extra):
            raise ArchiveFailure("archive-corrupt", f"member {show_name(name)}: bad extra field")
        tag, length = struct.unpack_from("<HH", extra, pos)
        if pos + 4 + length > len(extra):
            raise ArchiveFailure("archive-corrupt", f"member {show_name(name)}: bad extra field")
        yield tag, extra[pos + 4 : pos + 4 + length]
        pos += 4 + length


def _zip64_fields(
    name: str, extra: bytes, usize: int, csize: int, offset: int, disk: int
) -> tuple[int, int, int, int, bool]:
    """Apply a zip64 extra field to the directory entry's saturated 32-bit fields."""
    if not extra:
        return usize, csize, offset, disk, False
    blocks = [body for tag, body in _extras(name, extra) if tag == _ZIP64_EXTRA]
    if len(blocks) > 1:
        raise ArchiveFailure("archive-corrupt", f"member {show_name(name)}: two zip64 extra fields")
    if not blocks:
        return usize, csize, offset, disk, False
    body = blocks[0]
    pos = 0
    values = []
    for value, sentinel, width in (
        (usize, _U32, 8),
        (csize, _U32, 8),
        (offset, _U32, 8),
        (disk, _U16, 4),
    ):
        if value == sentinel:
            if pos + width > len(body):
                raise ArchiveFailure(
                    "archive-corrupt", f"member {show_name(name)}: short zip64 extra field"
                )
            value = int.from_bytes(body[pos : pos + width], "little")
            pos += width
        values.append(value)
    return values[0], values[1], values[2], values[3], True


def _local_zip64(extra: bytes, usize: int, csize: int, where: str) -> tuple[int, int, bool]:
    for tag, body in _extras(where, extra):
        if tag == _ZIP64_EXTRA:
            if len(body) < 16:
                raise ArchiveFailure("archive-corrupt", f"{where}: short local zip64 extra field")
            big_usize, big_csize = struct.unpack_from("<QQ", body)
            return (
                big_usize if usize == _U32 else usize,
                big_csize if csize == _U32 else csize,
                True,
            )
    raise ArchiveFailure("archive-corrupt", f"{where}: saturated local sizes without zip64 extra")


def _check_sizes(name: str, method: int, csize: int, usize: int, limits: Limits) -> None:
    if name.endswith("/") and usize:
        raise ArchiveFailure("archive-corrupt", f"directory entry {show_name(name)} has data")
    if method == STORED and csize != usize:
        raise ArchiveFailure(
            "archive-size-mismatch",
            f"stored member {show_name(name)} declares {csize} compressed but {usize} bytes",
        )
    if usize > RATIO_FLOOR and usize > limits.max_member_ratio * max(csize, 1):
        raise ArchiveFailure(
            "archive-ratio-too-high",
            f"member {show_name(name)} declares {usize} bytes from {csize} compressed "
            f"(ratio over {limits.max_member_ratio})",
        )
