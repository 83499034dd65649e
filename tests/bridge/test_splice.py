"""The answer the service sends for a .pt2 (app.jobs.output.Splicer): the head file plus runs
of the upload add up to the very archive the deserialize job writes, every spliced member is
checked against its CRC, and only what is kept is made durable."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

import schema
from app.archive import ArchiveFailure
from app.bridge.exported import SerializedProgram
from app.jobs import torch as jobs
from app.jobs.output import ARCHIVE, HEAD, Segment
from tests.bridge.test_torch_path import _corrupt, _source


def _joined(segments: list[Segment], head: Path, archive: Path) -> bytes:
    files = {HEAD: head.read_bytes(), ARCHIVE: archive.read_bytes()}
    return b"".join(files[where][offset : offset + length] for where, offset, length in segments)


@pytest.mark.parametrize("name", ["conv", "constants", "dtypes", "linear_bn_train"])
def test_the_spliced_answer_is_the_archive_the_job_writes(
    name: str,
    archives: dict[str, bytes],
    serialized: dict[str, SerializedProgram],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    synced: list[int] = []
    monkeypatch.setattr("app.jobs.output.os.fsync", synced.append)
    archive = tmp_path / "upload.pt2"
    archive.write_bytes(archives[name])
    document = schema.dump(serialized[name].doc)
    head, written = tmp_path / "head", tmp_path / "written.pt2"
    segments = jobs.job_splice_pt2(document, _source(archive), head)
    assert not synced  # the head is sent, then removed
    jobs.job_deserialize_to_pt2(document, _source(archive), written)
    assert len(synced) == 1  # a kept output is durable
    assert _joined(segments, head, archive) == written.read_bytes()
    stored = sum(length for where, _, length in segments if where == ARCHIVE)
    with zipfile.ZipFile(archive) as zf:
        tensors = [
            i.file_size
            for i in zf.infolist()
            if "/data/weights/" in i.filename or "/data/constants/" in i.filename
            if not i.filename.endswith(".json")
        ]
    assert stored >= sum(tensors) > 0  # the tensors were spliced, not copied


def test_a_corrupt_member_fails_the_splice_and_leaves_no_head(
    archives: dict[str, bytes], serialized: dict[str, SerializedProgram], tmp_path: Path
) -> None:
    archive = tmp_path / "upload.pt2"
    archive.write_bytes(archives["linear_bn_train"])
    _corrupt(archive)
    head = tmp_path / "head"
    with pytest.raises(ArchiveFailure) as failed:
        jobs.job_splice_pt2(schema.dump(serialized["linear_bn_train"].doc), _source(archive), head)
    assert failed.value.code == "archive-crc-mismatch"
    assert not head.exists()


def test_deflated_members_are_inflated_into_the_head(
    archives: dict[str, bytes], serialized: dict[str, SerializedProgram], tmp_path: Path
) -> None:
    stored, deflated = tmp_path / "stored.pt2", tmp_path / "deflated.pt2"
    stored.write_bytes(archives["conv"])
    with zipfile.ZipFile(stored) as source, zipfile.ZipFile(deflated, "w") as out:
        for info in source.infolist():
            out.writestr(info.filename, source.read(info), compress_type=zipfile.ZIP_DEFLATED)
    document = schema.dump(serialized["conv"].doc)
    head, written = tmp_path / "head", tmp_path / "written.pt2"
    segments = jobs.job_splice_pt2(document, _source(deflated), head)
    assert [where for where, _, _ in segments] == [HEAD]
    jobs.job_deserialize_to_pt2(document, _source(stored), written)
    assert head.read_bytes() == written.read_bytes()
