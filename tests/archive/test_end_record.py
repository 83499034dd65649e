"""The end record torch's zip reader would take is the one we take: a second end record hidden
in the archive comment (which miniz and Python's zipfile prefer) is refused, a plain comment
is not."""

from __future__ import annotations

import io
import struct
import zipfile

import pytest

from app.archive import ArchiveFailure, ZipReader
from tests.archive.zipcraft import build, end_record, stored


def _with_comment(comment: bytes) -> bytes:
    """A one-member zip whose end record carries `comment`."""
    data = build([stored("a/shown.txt", b"shown")])
    return data[:-2] + struct.pack("<H", len(comment)) + comment


def _names(data: bytes) -> list[str]:
    with ZipReader(data) as reader:
        return reader.names


@pytest.mark.parametrize("after", [b"-", b"trailing bytes"])
def test_an_end_record_in_the_comment_is_refused(after: bytes) -> None:
    # the hidden record lists an empty directory; its own comment length does not reach the end
    data = _with_comment(end_record(0, 0, 0) + after)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.namelist() == []  # Python's reader takes the hidden record
    with pytest.raises(ArchiveFailure) as info:
        _names(data)
    assert info.value.code == "archive-ambiguous-end"


@pytest.mark.parametrize("comment", [b"", b"a plain comment", b"PK\x05\x06 too short"])
def test_a_comment_without_a_whole_end_record_is_read(comment: bytes) -> None:
    assert _names(_with_comment(comment)) == ["a/shown.txt"]
