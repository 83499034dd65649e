"""Hostile zips, hand-made or rewritten: each is refused with its own code, before inflation, in
under a second and with under 50 MiB of RSS growth (measured around every refusal)."""

from __future__ import annotations

import io
import os
import stat
import struct
import time
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from app.archive import ArchiveFailure, ZipReader, open_archive
from app.settings import Limits
from tests.archive.zipcraft import (
    CENTRAL,
    EOCD,
    FIXED_TIME,
    LOCAL,
    Member,
    build,
    central_header,
    deflate,
    deflated,
    end_record,
    local_header,
    stored,
)

MiB = 1024 * 1024
GiB = 1024 * MiB
LIMIT = 1 << 31
#: What refusing a hostile zip may cost, whatever the zip.
REFUSAL_SECONDS = 1.0
REFUSAL_BYTES = 50 * MiB


def read_all(data: bytes, limits: Limits | None = None) -> dict[str, bytes]:
    """Open a zip and read (verify) every member."""
    with ZipReader(data, limits) as reader:
        return {name: reader.read_member(name, LIMIT) for name in reader.names}


def stream_all(data: bytes) -> int:
    """Open a zip and stream (verify) every member; the bytes streamed."""
    with ZipReader(data) as reader:
        return sum(len(chunk) for name in reader.names for chunk in reader.iter_member(name))


def rss_bytes() -> int:
    """Resident set size now, from /proc/self/statm (unlike VmHWM, it goes down as well)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextmanager
def memory_budget(limit: int) -> Iterator[None]:
    """Assert that the block's Python peak allocation and RSS growth stay under `limit`."""
    tracemalloc.start()
    before = rss_bytes()
    try:
        yield
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        grown = rss_bytes() - before
    assert peak < limit, f"peak Python allocation {peak} bytes"
    assert grown < limit, f"RSS grew by {grown} bytes"


def refused(code: str, action: Callable[[], object]) -> ArchiveFailure:
    """Run `action`, which must raise ArchiveFailure with exactly `code` in under
    REFUSAL_SECONDS and within a memory budget of REFUSAL_BYTES."""
    # timed with tracemalloc on, which slows allocation-heavy parsing: an upper bound
    started = time.perf_counter()
    with memory_budget(REFUSAL_BYTES), pytest.raises(ArchiveFailure) as failure:
        action()
    elapsed = time.perf_counter() - started
    assert failure.value.code == code, str(failure.value)
    assert elapsed < REFUSAL_SECONDS, f"refused in {elapsed:.3f} s"
    return failure.value


# -- well-formed zips of several writers -------------------------------------------------------


class _Unseekable(io.RawIOBase):
    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: object) -> int:
        chunk = bytes(b)  # type: ignore[call-overload]
        self.data += chunk
        return len(chunk)


@pytest.mark.parametrize("seekable", [True, False])
@pytest.mark.parametrize("zip64", [True, False])
def test_python_zipfile_variants_read_back(seekable: bool, zip64: bool) -> None:
    """Deflate, data descriptors (unseekable writer) and zip64 extras all read correctly."""
    sink: io.BytesIO | _Unseekable = io.BytesIO() if seekable else _Unseekable()
    contents = {"r/a.bin": os.urandom(3000) * 3, "r/b.txt": b"hello " * 500, "r/empty": b""}
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED) as target:
        for name, data in contents.items():
            with target.open(zipfile.ZipInfo(name, FIXED_TIME), "w", force_zip64=zip64) as w:
                w.write(data)
    data = sink.getvalue() if isinstance(sink, io.BytesIO) else bytes(sink.data)
    assert read_all(data) == contents
    with ZipReader(data) as reader:
        assert reader.root() == "r"
        assert reader.head("r/b.txt", 6) == b"hello "
        assert b"".join(reader.iter_member("r/a.bin", chunk=1000)) == contents["r/a.bin"]
        described = reader.members["r/a.bin"].flags & 0x08
        assert bool(described) is not seekable


def test_empty_zip_has_no_members() -> None:
    with ZipReader(end_record(0, 0, 0), single_root=False) as reader:
        assert reader.names == []
    refused("archive-many-roots", lambda: ZipReader(end_record(0, 0, 0)))


# -- not a zip, truncated, corrupt ------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"hello", b"not a zip at all " * 100, os.urandom(4096)])
def test_not_a_zip(data: bytes) -> None:
    refused("archive-not-zip", lambda: ZipReader(data))


@pytest.mark.parametrize("keep", [0.5, 0.9, -1, -30])
def test_truncated(keep: float, zoo_archives: dict[str, bytes]) -> None:
    data = zoo_archives["conv"]
    cut = int(len(data) * keep) if keep > 0 else len(data) + int(keep)
    refused("archive-truncated", lambda: ZipReader(data[:cut]))


def test_central_directory_cut_short() -> None:
    data = build([stored("r/a", b"x" * 10), stored("r/b", b"y" * 10)])
    # the end record claims one more entry than the directory holds
    tampered = data[: -EOCD.size] + end_record(3, len(data) - EOCD.size - 80, 80)
    refused("archive-corrupt", lambda: ZipReader(tampered))


def test_end_records_must_agree(zoo_archives: dict[str, bytes]) -> None:
    data = bytearray(zoo_archives["conv"])
    # torch writes both end records; make the classic one disagree on the member count
    count_at = len(data) - EOCD.size + 10
    struct.pack_into("<H", data, count_at, struct.unpack_from("<H", data, count_at)[0] - 1)
    refused("archive-corrupt", lambda: ZipReader(bytes(data)))


@pytest.mark.parametrize(("claimed", "code"), [(40, "archive-overlap"), (100, "archive-truncated")])
def test_member_data_runs_on(claimed: int, code: str) -> None:
    member = stored("r/a", b"x" * claimed)
    header = local_header(member)
    central = central_header(member, 0)
    # the directory starts after 10 of the claimed bytes; 100 would run past the file's end
    data = header + member.stored[:10] + central + end_record(1, len(central), len(header) + 10)
    refused(code, lambda: ZipReader(data))


# -- limits -----------------------------------------------------------------------------------


def test_too_many_members(zoo_archives: dict[str, bytes]) -> None:
    failure = refused(
        "archive-too-many-members", lambda: ZipReader(zoo_archives["conv"], Limits(max_members=5))
    )
    assert failure.message == "the archive declares 13 members (limit 5)"


def test_declared_total_too_large(zoo_archives: dict[str, bytes]) -> None:
    refused(
        "archive-too-large",
        lambda: ZipReader(zoo_archives["conv"], Limits(max_total_uncompressed=1000)),
    )


def test_member_over_callers_limit() -> None:
    data = build([stored("r/a", b"x" * 100)])
    with ZipReader(data) as reader:
        refused("archive-member-too-large", lambda: reader.read_member("r/a", 99))
        assert reader.read_member("r/a", 100) == b"x" * 100
        refused("archive-missing-member", lambda: reader.read_member("r/b", 100))


def test_small_members_may_compress_well() -> None:
    zeros = bytes(MiB)  # ratio about 1000, but not over the 1 MiB floor
    assert read_all(build([deflated("r/zeros", zeros)])) == {"r/zeros": zeros}
    refused("archive-ratio-too-high", lambda: ZipReader(build([deflated("r/z", zeros + b"!")])))


def test_bomb_refused_by_ratio_without_inflating(
    bomb: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    member = Member("archive/data/weights/weight_0", bomb, GiB, 0, method=8)
    data = build([member])

    def no_inflation(*args: object) -> object:
        raise AssertionError("inflation attempted")

    monkeypatch.setattr(zlib, "decompressobj", no_inflation)
    failure = refused("archive-ratio-too-high", lambda: open_archive(data))
    assert f"{GiB} bytes from {len(bomb)} compressed" in failure.message


def test_bomb_under_declared_stops_at_the_declared_size(bomb: bytes) -> None:
    """A bomb that lies about its size passes the ratio rule, then stops at the declared size."""
    member = Member("r/bomb", bomb, len(bomb), zlib.crc32(bytes(len(bomb))), method=8)
    data = build([member])
    refused("archive-size-mismatch", lambda: read_all(data))
    refused("archive-size-mismatch", lambda: stream_all(data))


def test_inflation_streams_in_bounded_memory() -> None:
    zeros = 32 * MiB
    member = deflated("r/zeros", b"")
    member.stored = deflate(bytes(zeros))
    member.size, member.crc = zeros, zlib.crc32(bytes(zeros))
    data = build([member])
    del member
    with ZipReader(data, Limits(max_member_ratio=2000)) as reader, memory_budget(16 * MiB):
        total = 0
        for chunk in reader.iter_member("r/zeros", chunk=MiB):
            assert len(chunk) <= MiB
            total += len(chunk)
    assert total == zeros


# -- names and file types ---------------------------------------------------------------------


def test_duplicate_names() -> None:
    data = build([stored("r/a", b"1"), stored("r/a", b"2")])
    refused("archive-duplicate-name", lambda: ZipReader(data))


def test_two_spellings_of_one_name_are_refused(tmp_path: Path) -> None:
    """b"r/\xc3\xa9" flagged UTF-8 and b"r/\x82" in cp437 both read as "r/é": one member to a
    reader that looks names up by text, two to torch's, which looks them up by bytes."""
    utf8 = stored("r/\u00e9", b"1")
    cp437 = stored("r/\u00e9", b"2", flags=0, encoding="cp437")
    data = build([stored("r/version", b"3"), utf8, cp437])
    path = tmp_path / "twins.zip"
    path.write_bytes(data)
    # torch finds the UTF-8 spelling's bytes; a reader by text would have kept the last one
    assert torch._C.PyTorchFileReader(str(path)).get_record("\u00e9") == b"1"
    refused("archive-duplicate-name", lambda: ZipReader(data))
    # either spelling alone is a member like any other
    for member in (utf8, cp437):
        with ZipReader(build([member])) as reader:
            assert reader.names == ["r/\u00e9"]


@pytest.mark.parametrize(
    "name",
    [
        "r/../../etc/passwd",
        "../r/a",
        "/etc/passwd",
        "C:/windows/system32",
        "r\\a",
        "r/a\x00.txt",
        "r/" + "a" * 1023,
        "r//a",
        "r/./a",
        "",
    ],
)
def test_bad_names(name: str) -> None:
    data = build([stored(name, b"x")])
    refused("archive-bad-name", lambda: ZipReader(data))


def test_names_at_the_limit_are_fine() -> None:
    name = "r/" + "a" * 1022
    assert list(read_all(build([stored(name, b"x")]))) == [name]


def test_name_not_utf8() -> None:
    member = stored("r/a", b"x")
    data = build([member]).replace(b"r/a", b"r/\xff")
    refused("archive-bad-name", lambda: ZipReader(data))


def test_symlink_entry() -> None:
    info = zipfile.ZipInfo("r/link", FIXED_TIME)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        target.writestr(info, "/etc/passwd")
        target.writestr(zipfile.ZipInfo("r/file", FIXED_TIME), "x")
    refused("archive-symlink", lambda: ZipReader(out.getvalue()))


def test_device_entry() -> None:
    member = stored("r/dev", b"", external_attr=(stat.S_IFCHR | 0o600) << 16)
    refused("archive-special-file", lambda: ZipReader(build([member])))


def test_regular_unix_modes_are_fine() -> None:
    member = stored("r/a", b"x", external_attr=(stat.S_IFREG | 0o644) << 16, made_by=0x031E)
    assert read_all(build([member])) == {"r/a": b"x"}


def test_two_roots() -> None:
    data = build([stored("a/x", b"1"), stored("b/y", b"2")])
    refused("archive-many-roots", lambda: ZipReader(data))
    refused("archive-many-roots", lambda: open_archive(data))
    refused("archive-many-roots", lambda: ZipReader(build([stored("a/x", b"1"), stored("a", b"")])))
    with ZipReader(data, single_root=False) as reader:
        assert reader.names == ["a/x", "b/y"]


# -- methods, flags, local headers ------------------------------------------------------------


def test_encrypted_entry() -> None:
    refused("archive-encrypted", lambda: ZipReader(build([stored("r/a", b"x", flags=0x0801)])))


@pytest.mark.parametrize("method", [12, 14, 93, 1])
def test_unsupported_method(method: int) -> None:
    data = build([stored("r/a", b"x", method=method)])
    refused("archive-unsupported-compression", lambda: ZipReader(data))


@pytest.mark.parametrize(
    "override",
    [{"local_name": "r/b"}, {"local_method": 0}, {"local_size": 7}],
    ids=["name", "method", "size"],
)
def test_local_header_disagrees(override: dict[str, object]) -> None:
    data = build([deflated("r/a", b"hello" * 20, **override)])
    refused("archive-header-mismatch", lambda: ZipReader(data))


def test_stored_sizes_disagree() -> None:
    data = build([stored("r/a", b"x", size=2)])
    refused("archive-size-mismatch", lambda: ZipReader(data))


def test_overlapping_entries() -> None:
    """The "quoted overlap" bomb: one member's data contains another member's local header."""
    inner = stored("r/b", b"payload" * 10)
    inner_local = local_header(inner) + inner.stored
    prefix = local_header(stored("r/a", inner_local))
    outer = stored("r/a", inner_local)
    body = prefix + inner_local
    central = central_header(outer, 0) + central_header(inner, len(prefix))
    data = body + central + end_record(2, len(central), len(body))
    # every header is consistent on its own: only the overlap gives it away
    with zipfile.ZipFile(io.BytesIO(data)) as theirs:
        assert theirs.namelist() == ["r/a", "r/b"]
    failure = refused("archive-overlap", lambda: ZipReader(data))
    assert "'r/a'" in failure.message
    assert "'r/b'" in failure.message


def quoted_overlap_bomb(count: int) -> bytes:
    """About `count` MiB declared in about `count` * 90 bytes, every header honest on its own.

    The "quoted overlap" construction: each member's deflate stream opens with a stored block
    quoting the next member's local header, then runs on into that member's data, down to one
    kernel of zeros all members share. Every member declares at most 1 MiB, so the ratio rule
    does not apply, and the total stays under the limit: only the overlap gives it away. The
    CRCs are 0: honest ones would cost inflating the bomb, and a reader inflates before it can
    check one.
    """
    names = [f"r/{index:06d}" for index in range(count)]
    header_size = LOCAL.size + len(names[0])
    size = MiB - count * header_size
    data = deflate(bytes(size))
    centrals: list[bytes] = []
    header = b""
    for index in reversed(range(count)):
        member = Member(names[index], data, size, 0, method=8)
        header = local_header(member)
        quote = struct.pack("<BHH", 0, len(header), len(header) ^ 0xFFFF)
        centrals.append(central_header(member, index * (len(quote) + len(header))))
        if index:
            data = quote + header + data
            size += len(header)
    body = header + data
    central = b"".join(reversed(centrals))
    return body + central + end_record(count, len(central), len(body))


def test_quoted_overlap_bomb() -> None:
    count = 1024
    data = quoted_overlap_bomb(count)
    with zipfile.ZipFile(io.BytesIO(data)) as theirs:
        infos = theirs.infolist()
    assert len(infos) == count
    assert max(info.file_size for info in infos) <= MiB
    assert sum(info.file_size for info in infos) > 0.9 * GiB
    assert len(data) < 100 * count
    # a trusting reader inflates the first member to its declared size: the next member's
    # header, quoted, then everything that follows it
    first, second = infos[0], infos[1]
    header = LOCAL.size + len(first.filename)
    inflated = zlib.decompressobj(-15).decompress(data[header : header + first.compress_size])
    assert len(inflated) == first.file_size
    assert inflated[:header] == data[second.header_offset : second.header_offset + header]
    failure = refused("archive-overlap", lambda: ZipReader(data))
    assert f"{first.filename!r}" in failure.message
    refused("archive-overlap", lambda: open_archive(data))


def test_two_entries_at_one_offset() -> None:
    member = stored("r/a", b"x")
    body = local_header(member) + member.stored
    central = central_header(member, 0) + central_header(stored("r/b", b"x"), 0)
    data = body + central + end_record(2, len(central), len(body))
    refused("archive-header-mismatch", lambda: ZipReader(data))


# -- verification on read ---------------------------------------------------------------------


@pytest.mark.parametrize("make", [stored, deflated], ids=["stored", "deflated"])
def test_crc_mismatch(make: Callable[..., Member]) -> None:
    raw = b"some bytes " * 50
    data = build([make("r/a", raw, crc=zlib.crc32(raw) ^ 1)])
    refused("archive-crc-mismatch", lambda: read_all(data))
    refused("archive-crc-mismatch", lambda: stream_all(data))


@pytest.mark.parametrize("lie", [+1, -1, +1000, -200])
def test_declared_size_lies(lie: int) -> None:
    raw = b"some bytes " * 50
    data = build([deflated("r/a", raw, size=len(raw) + lie)])
    refused("archive-size-mismatch", lambda: read_all(data))
    refused("archive-size-mismatch", lambda: stream_all(data))


def test_compressed_size_lies() -> None:
    raw = b"some bytes " * 50
    over = deflated("r/a", raw)
    over.stored += b"junk"
    under = deflated("r/a", raw)
    under.stored = under.stored[:-3]
    longer, shorter = build([over]), build([under])
    refused("archive-size-mismatch", lambda: read_all(longer))
    refused("archive-size-mismatch", lambda: read_all(shorter))


def test_invalid_deflate() -> None:
    data = build([Member("r/a", b"\xff" * 40, 100, 0, method=8)])
    with ZipReader(data) as reader:
        refused("archive-bad-deflate", lambda: reader.read_member("r/a", LIMIT))


def test_data_descriptor_must_agree() -> None:
    raw = b"described " * 30
    member = deflated("r/a", raw, flags=0x0808)
    header = local_header(member)
    body = header + member.stored + struct.pack("<4sIII", b"PK\x07\x08", 0, len(member.stored), 0)
    central = central_header(member, 0)
    data = body + central + end_record(1, len(central), len(body))
    refused("archive-header-mismatch", lambda: ZipReader(data))


def test_struct_sizes() -> None:
    """The hand-made headers have the zip specification's fixed sizes."""
    assert (LOCAL.size, CENTRAL.size, EOCD.size) == (30, 46, 22)


def test_torch_zip64_quirks() -> None:
    """What torch writes past 4 GiB, at small scale: zip64 offsets, wide data descriptors.

    Checked against a real 4 GiB torch.export.save archive: every member after the big one has
    local sizes 0, a local zip64 extra holding only its offset, a directory offset of
    0xFFFFFFFF with a zip64 extra, and a descriptor with 8-byte sizes.
    """
    raw = b"after the big one"
    crc = zlib.crc32(raw)
    name = b"big/data/weights/weight_2"
    zip64_offset = struct.pack("<HHQ", 1, 8, 0)
    local = LOCAL.pack(b"PK\x03\x04", 0, 0x0808, 0, 0, 0, 0, 0, 0, len(name), len(zip64_offset))
    descriptor = struct.pack("<4sIQQ", b"PK\x07\x08", crc, len(raw), len(raw))
    body = local + name + zip64_offset + raw + descriptor
    central = (
        CENTRAL.pack(
            b"PK\x01\x02",
            0,
            0,
            0x0808,
            0,
            0,
            0,
            crc,
            len(raw),
            len(raw),
            len(name),
            len(zip64_offset),
            0,
            0,
            0,
            0,
            0xFFFFFFFF,
        )
        + name
        + zip64_offset
    )
    data = body + central + end_record(1, len(central), len(body))
    with ZipReader(data) as reader:
        member = reader.members[name.decode()]
        assert member.end == len(body)
        assert reader.read_member(name.decode(), LIMIT) == raw
