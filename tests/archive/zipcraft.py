"""Hand-made zips for hostile-input tests: every header field under the test's control."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from dataclasses import dataclass, field

LOCAL = struct.Struct("<4sHHHHHIIIHH")
CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
EOCD = struct.Struct("<4sHHHHIIH")
UTF8 = 0x0800
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def deflate(raw: bytes) -> bytes:
    """Raw deflate (no zlib header), as zip stores it."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(raw) + compressor.flush()


@dataclass
class Member:
    """One member; the `local_*` fields override what the local header says."""

    name: str
    stored: bytes
    size: int
    crc: int
    method: int = 0
    flags: int = UTF8
    external_attr: int = 0
    made_by: int = 20
    local_name: str | None = None
    local_method: int | None = None
    local_size: int | None = None
    extra: bytes = field(default=b"")
    #: how the name is spelled in bytes (cp437, with `flags` 0, for a name without the UTF-8 flag)
    encoding: str = "utf-8"


def stored(name: str, raw: bytes, **overrides: object) -> Member:
    """A stored member with honest sizes and CRC unless overridden."""
    member = Member(name, raw, len(raw), zlib.crc32(raw))
    for key, value in overrides.items():
        setattr(member, key, value)
    return member


def deflated(name: str, raw: bytes, **overrides: object) -> Member:
    """A deflated member with honest sizes and CRC unless overridden."""
    member = Member(name, deflate(raw), len(raw), zlib.crc32(raw), method=8)
    for key, value in overrides.items():
        setattr(member, key, value)
    return member


def local_header(member: Member) -> bytes:
    """The local header (name and extra included) of a member."""
    name = (member.local_name if member.local_name is not None else member.name).encode(
        member.encoding
    )
    method = member.method if member.local_method is None else member.local_method
    size = member.size if member.local_size is None else member.local_size
    return (
        LOCAL.pack(
            b"PK\x03\x04",
            20,
            member.flags,
            method,
            0,
            0x21,
            member.crc,
            len(member.stored),
            size,
            len(name),
            len(member.extra),
        )
        + name
        + member.extra
    )


def central_header(member: Member, offset: int) -> bytes:
    """The central-directory entry of a member whose local header is at `offset`."""
    name = member.name.encode(member.encoding)
    return (
        CENTRAL.pack(
            b"PK\x01\x02",
            member.made_by,
            20,
            member.flags,
            member.method,
            0,
            0x21,
            member.crc,
            len(member.stored),
            member.size,
            len(name),
            len(member.extra),
            0,
            0,
            0,
            member.external_attr,
            offset,
        )
        + name
        + member.extra
    )


def end_record(count: int, cd_size: int, cd_offset: int) -> bytes:
    """A plain (non-zip64) end-of-central-directory record."""
    return EOCD.pack(b"PK\x05\x06", 0, 0, count, count, cd_size, cd_offset, 0)


def build(members: list[Member]) -> bytes:
    """A zip of the members, laid out one after the other."""
    body = bytearray()
    central = bytearray()
    for member in members:
        central += central_header(member, len(body))
        body += local_header(member) + member.stored
    return bytes(body + central + end_record(len(members), len(central), len(body)))


def rezip(
    archive: bytes,
    *,
    add: dict[str, bytes] | None = None,
    drop: set[str] | None = None,
    replace: dict[str, bytes] | None = None,
) -> bytes:
    """Rewrite an archive with python's zipfile (stored), adding, dropping or replacing members."""
    add, drop, replace = add or {}, drop or set(), replace or {}
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(archive)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target,
    ):
        for name in source.namelist():
            if name in drop:
                continue
            data = replace.get(name, source.read(name))
            target.writestr(zipfile.ZipInfo(name, FIXED_TIME), data)
        for name, data in add.items():
            target.writestr(zipfile.ZipInfo(name, FIXED_TIME), data)
    return out.getvalue()
