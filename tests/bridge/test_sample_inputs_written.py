"""Deserialize writes a program's sample inputs when the pickle machine proves them: without
example inputs, torch.export.load's module skips the program's guards and runs inputs the
exported program refuses. The written member is the upload's, byte for byte, in the archive
the job keeps and in the answer the service splices alike; unproven ones are left out."""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
from torch.export import Dim

from app import operations as ops
from app.jobs import torch as jobs
from app.settings import Settings
from app.tensors.sources import TensorSource
from tests.bridge.test_splice import _joined
from tests.registry.conftest import rewrite_member
from tests.zoo import archive_bytes

SETTINGS = Settings()
SAMPLES = "/data/sample_inputs/model.pt"


class Windows(torch.nn.Module):
    """Sums windows of four: the export guards that the length is a multiple of four."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (4 - x.shape[0] % 4) % 4 == 0:
            return x.view(-1, 4).sum(1)
        return x


@pytest.fixture(scope="module")
def guarded() -> bytes:
    """torch.export.save's archive of a program whose guards_code holds a modular guard."""
    ep = torch.export.export(Windows(), (torch.randn(8),), dynamic_shapes=({0: Dim.AUTO},))
    assert any("% 4" in guard for guard in ep._guards_code)
    return archive_bytes(ep)


def _member(archive: bytes | Path, suffix: str) -> bytes:
    with zipfile.ZipFile(archive if isinstance(archive, Path) else io.BytesIO(archive)) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith(suffix)))


def _written(upload: Path, tmp_path: Path) -> tuple[TensorSource, Path]:
    """What deserialize writes from `upload`, by both of its jobs; the spliced answer must be
    the kept archive byte for byte."""
    with ops.open_source(upload, "zip", SETTINGS) as source:
        tensors = ops.with_sample_inputs(ops.weights_from(None, source, None), source, SETTINGS)
        document = source.documents["model"]
    written, head = tmp_path / "written.pt2", tmp_path / "head"
    jobs.job_deserialize_to_pt2(document, tensors, written)
    segments = jobs.job_splice_pt2(document, tensors, head)
    assert _joined(segments, head, upload) == written.read_bytes()
    return tensors, written


def test_proven_sample_inputs_are_written_and_the_guards_kept(
    guarded: bytes, tmp_path: Path
) -> None:
    upload = tmp_path / "upload.pt2"
    upload.write_bytes(guarded)
    tensors, written = _written(upload, tmp_path)
    assert tensors.sample_inputs is not None
    assert _member(written, SAMPLES) == _member(guarded, SAMPLES)
    torch.testing.assert_close(
        torch.export.load(written).example_inputs, torch.export.load(upload).example_inputs
    )
    off_grid = torch.randn(10)  # a length the export's guard refuses
    for path in (upload, written):
        with pytest.raises(AssertionError, match="Guard failed"):
            torch.export.load(path).module()(off_grid)


class Opaque:
    """A class torch's weights_only loader does not allow."""


def test_unproven_sample_inputs_are_left_out(guarded: bytes, tmp_path: Path) -> None:
    foreign = pickle.dumps(((Opaque(),), {}), protocol=2)
    upload = tmp_path / "upload.pt2"
    upload.write_bytes(rewrite_member(guarded, SAMPLES, lambda _: foreign))
    tensors, written = _written(upload, tmp_path)
    assert tensors.sample_inputs is None
    assert _member(written, SAMPLES) == b""
    assert torch.export.load(written).example_inputs is None
