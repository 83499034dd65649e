"""Where torch's zip reader (miniz) would read another archive than ours, we refuse: a second
end record hidden in the archive comment (which miniz and Python's zipfile prefer; a plain
comment is read), and names that differ only in ASCII case (one name to miniz's lookup)."""

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


@pytest.mark.parametrize(
    ("first", "second"),
    [("a/data.pt", "a/DATA.pt"), ("a/x/m.json", "a/X/m.json"), ("a/é.txt", "a/é.TXT")],
)
def test_names_torch_does_not_tell_apart_are_refused(first: str, second: str) -> None:
    import torch

    version = stored("a/version", b"3\n")  # torch's reader requires one
    data = build([version, stored(first, b"first"), stored(second, b"second")])
    # torch's reader answers both names with one of the two members
    reader = torch._C.PyTorchFileReader(io.BytesIO(data))
    answers = {bytes(reader.get_record(n.partition("/")[2])) for n in (first, second)}
    assert len(answers) == 1
    with pytest.raises(ArchiveFailure) as info:
        _names(data)
    assert info.value.code == "archive-duplicate-name"
    assert "only in case" in info.value.message


def test_names_that_differ_beyond_ascii_case_are_read() -> None:
    import torch

    # miniz folds A-Z only: "é" and "É" are two names to it, and to us
    names = ["a/é.txt", "a/É.txt"]
    data = build([stored("a/version", b"3\n"), *(stored(n, n.encode()) for n in names)])
    reader = torch._C.PyTorchFileReader(io.BytesIO(data))
    assert [bytes(reader.get_record(n.partition("/")[2])) for n in names] == [
        n.encode() for n in names
    ]
    assert _names(data) == ["a/version", *names]
