"""torch.save files that torch.load reads as another file than the zip we prove: one that does
not start with a local header (torch reads the legacy format from its first byte), a second
end record in the comment, and names that differ only in case. Each is unproven by us; torch's
weights_only load of the first two fails (torch.export.load then unpickles them in full, or
fails), judged by torch in one child process."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import torch

from app.archive.pickles import check_torch_save
from tests.archive.test_pickles import LIMITS, P2, g, saved, torch_weights_only, u
from tests.archive.zipcraft import FIXED_TIME, end_record


def _prefixed(data: bytes, prefix: bytes) -> bytes:
    """`data` (a zip) after `prefix`, every offset moved so the zip stays whole."""
    cd_size, cd_offset = struct.unpack_from("<II", data, len(data) - 10)
    directory = bytearray(data[cd_offset : cd_offset + cd_size])
    pos = 0
    while pos < len(directory):
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", directory, pos + 28)
        (offset,) = struct.unpack_from("<I", directory, pos + 42)
        struct.pack_into("<I", directory, pos + 42, offset + len(prefix))
        pos += 46 + name_len + extra_len + comment_len
    end = bytearray(data[-22:])
    struct.pack_into("<I", end, 16, cd_offset + len(prefix))
    return prefix + data[:cd_offset] + bytes(directory) + bytes(end)


def _with_comment(data: bytes, comment: bytes) -> bytes:
    return data[:-2] + struct.pack("<H", len(comment)) + comment


def _case_twin(data: bytes, pickled: bytes) -> bytes:
    """A DATA.pkl beside data.pkl (written first): one name to torch's zip reader."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        root = source.namelist()[0].partition("/")[0]
        target.writestr(zipfile.ZipInfo(f"{root}/DATA.pkl", FIXED_TIME), pickled)
        for name in source.namelist():
            target.writestr(zipfile.ZipInfo(name, FIXED_TIME), source.read(name))
    return out.getvalue()


def test_files_torch_reads_otherwise_are_unproven_and_torch_does_not_load_them(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    base = saved(torch.arange(3.0))
    evil = P2 + g("posix", "system") + u(f"touch {marker}") + b"\x85R."
    corpus = {
        "spanning-marker-first": _prefixed(base, b"PK\x07\x08"),
        "end-record-in-comment": _with_comment(base, end_record(0, 0, 0) + b"-"),
        "case-twin-data-pkl": _case_twin(base, evil),
    }
    assert check_torch_save(_prefixed(base, b""), LIMITS) == []  # the rewriting keeps it whole
    files = {}
    for name, data in corpus.items():
        assert check_torch_save(data, LIMITS) != [], name
        files[name] = tmp_path / f"{name}.pt"
        files[name].write_bytes(data)
    theirs = torch_weights_only(files, marker)
    # a case twin loads as whichever member torch's lookup lands on: ambiguous, not refused
    del theirs["case-twin-data-pkl"]
    assert all(verdict.startswith("refused") for verdict in theirs.values()), theirs
    assert not marker.exists()
