"""Members read ahead on a helper thread: same bytes, same errors, bounded, no leaked thread."""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Iterator

import pytest

from app.archive import ZipReader
from app.archive.readahead import read_ahead
from tests.archive.test_zipread import memory_budget, refused
from tests.archive.zipcraft import Member, build, deflated, stored

MiB = 1024 * 1024
RAW = bytes(range(256)) * 40
CHUNK = 1000


def flipped(raw: bytes, at: int) -> bytes:
    """`raw` with the byte at `at` changed."""
    return raw[:at] + bytes([raw[at] ^ 0x5A]) + raw[at + 1 :]


# -- through the zip reader -------------------------------------------------------------------


@pytest.mark.parametrize("make", [stored, deflated], ids=["stored", "deflated"])
@pytest.mark.parametrize("at", [0, 4321, len(RAW) - 1], ids=["first", "middle", "last"])
def test_multi_block_crc_mismatch_is_raised_after_the_last_block(
    make: Callable[..., Member], at: int
) -> None:
    """The declared CRC is that of bytes differing from the member's in one place."""
    data = build([make("r/a", RAW, crc=zlib.crc32(flipped(RAW, at)))])
    received = bytearray()

    def consume() -> None:
        for block in reader.iter_member("r/a", chunk=CHUNK):
            received.extend(block)

    with ZipReader(data) as reader:
        failure = refused("archive-crc-mismatch", consume)
        assert bytes(received) == RAW
        refused("archive-crc-mismatch", lambda: reader.read_member("r/a", len(RAW)))
    assert "'r/a'" in failure.message


@pytest.mark.parametrize("make", [stored, deflated], ids=["stored", "deflated"])
@pytest.mark.parametrize("chunk", [7, CHUNK, len(RAW) - 1, len(RAW), len(RAW) + 1])
def test_honest_members_read_back_at_any_chunk_size(
    make: Callable[..., Member], chunk: int
) -> None:
    with ZipReader(build([make("r/a", RAW)])) as reader:
        blocks = list(reader.iter_member("r/a", chunk=chunk))
    assert b"".join(blocks) == RAW
    assert max(len(b) for b in blocks) <= chunk


@pytest.mark.parametrize("how", ["close", "drop", "raise"])
def test_a_stream_left_early_leaves_no_thread_behind(how: str) -> None:
    before = set(threading.enumerate())
    with ZipReader(build([stored("r/a", RAW)])) as reader:
        stream = reader.iter_member("r/a", chunk=CHUNK)
        assert next(stream) == RAW[:CHUNK]
        assert set(threading.enumerate()) - before, "a multi-block member is read on a thread"
        if how == "close":
            stream.close()
        elif how == "drop":
            del stream
        else:
            with pytest.raises(KeyError):
                stream.throw(KeyError("consumer failed"))
    assert set(threading.enumerate()) - before == set()


def test_a_large_stored_member_streams_in_bounded_memory() -> None:
    raw = bytes(range(256)) * (128 * 1024)
    data = build([stored("r/big", raw)])
    with ZipReader(data) as reader, memory_budget(12 * MiB):
        total = 0
        for block in reader.iter_member("r/big", chunk=MiB):
            total += len(block)
    assert total == len(raw)


# -- the helper itself ------------------------------------------------------------------------


class Counted:
    """An iterator over range(n) that counts what was taken from it, then may fail."""

    def __init__(self, n: int, failure: Exception | None = None) -> None:
        self.n, self.failure, self.taken = n, failure, 0

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            self.taken += 1
            yield i
        if self.failure is not None:
            raise self.failure


def test_items_then_the_producers_exception_in_order() -> None:
    received: list[int] = []
    stream = read_ahead(iter(Counted(5, ValueError("bad block"))), depth=2)
    with pytest.raises(ValueError, match="bad block"):
        received.extend(stream)
    assert received == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_the_producer_runs_at_most_depth_items_ahead(depth: int) -> None:
    source = Counted(1000)
    stream = read_ahead(iter(source), depth)
    assert next(stream) == 0
    time.sleep(0.1)  # room for an unbounded producer to show itself
    # one item with the consumer, `depth` queued, one taken and waiting for room
    assert source.taken <= depth + 2
    stream.close()
    taken = source.taken
    time.sleep(0.05)
    assert source.taken == taken


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="depth"):
        next(read_ahead(iter([1]), depth=0))
