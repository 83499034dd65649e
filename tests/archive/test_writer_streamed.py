"""write_archive with members streamed from a source archive: the same bytes as from memory,
memory bounded by the copy's chunks, and a source that does not match its declared CRC refused."""

from __future__ import annotations

import io
import tracemalloc
import zlib
from pathlib import Path

import pytest
import torch

from app.archive import ArchiveFailure, open_archive, write_archive
from app.archive.raw import Streamed, StreamedTensor
from tests.zoo import archive_bytes

MiB = 1024 * 1024


class Wide(torch.nn.Module):
    """One 32 MiB weight: far more than the copy may hold at once."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4096, 2048, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x)
        return out


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wide") / "wide.pt2"
    ep = torch.export.export(Wide(), (torch.randn(1, 4096),), strict=False)
    torch.export.save(ep, path)
    return path


def test_streamed_members_write_the_same_bytes_as_in_memory(wide: Path) -> None:
    with open_archive(wide) as archive:
        from_memory, streamed = io.BytesIO(), io.BytesIO()
        source = archive.raw_tensors()
        write_archive(from_memory, archive.documents, source)
        write_archive(streamed, archive.documents, archive.streamed_tensors())
    assert streamed.getvalue() == from_memory.getvalue()
    with open_archive(streamed.getvalue()) as written:
        assert [t.data for t in written.raw_tensors()] == [t.data for t in source]


def test_streaming_a_large_tensor_holds_a_few_chunks(wide: Path, tmp_path: Path) -> None:
    target = tmp_path / "out.pt2"
    with open_archive(wide) as archive:
        tensors = archive.streamed_tensors()
        assert sum(t.data.size for t in tensors) == 32 * MiB
        tracemalloc.start()
        try:
            write_archive(target, archive.documents, tensors)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 8 * MiB, peak
    assert torch.export.load(target).module()(torch.ones(1, 4096)).shape == (1, 2048)


def test_a_stream_that_does_not_match_its_declared_crc_is_refused(tmp_path: Path) -> None:
    ep = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), strict=False)
    target = tmp_path / "out.pt2"
    with open_archive(archive_bytes(ep)) as archive:
        tensors = archive.streamed_tensors()
        first = tensors[0]
        data = bytes(first.data.size)
        lying = Streamed(first.data.size, zlib.crc32(data) ^ 1, lambda: iter([data]))
        tensors[0] = StreamedTensor(first.name, first.kind, first.meta, lying)
        with pytest.raises(ArchiveFailure) as caught:
            write_archive(target, archive.documents, tensors)
    assert caught.value.code == "archive-write-refused"
    assert list(tmp_path.iterdir()) == []
