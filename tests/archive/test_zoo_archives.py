"""torch-written archives of every zoo program: read without torch, checked against torch."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import orjson
import pytest
import torch

from app.archive import (
    ArchiveFailure,
    ZipReader,
    manifest,
    open_archive,
    write_archive,
    writer,
)
from tests.zoo import PROGRAM_NAMES, ZooProgram, outputs_close, torch_json

LIMIT = 1 << 30


def storage_bytes(tensor: torch.Tensor) -> bytes:
    """The raw bytes of a tensor's whole untyped storage."""
    storage = tensor.detach().untyped_storage()
    return torch.empty(0, dtype=torch.uint8).set_(storage).numpy().tobytes()


def expected_tensors(program: ZooProgram) -> dict[str, tuple[str, torch.Tensor]]:
    """Every stored tensor of an exported program with its kind, as torch sees them."""
    out: dict[str, tuple[str, torch.Tensor]] = {}
    for fqn, tensor in program.ep.state_dict.items():
        out[fqn] = ("parameter" if isinstance(tensor, torch.nn.Parameter) else "buffer", tensor)
    for fqn, value in program.ep.constants.items():
        if isinstance(value, torch.Tensor):
            out[fqn] = ("constant", value)
    return out


def load_with_torch(data: bytes) -> torch.export.ExportedProgram:
    """torch.export.load on an archive this test suite wrote itself."""
    return torch.export.load(io.BytesIO(data))


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_documents_are_torchs_json(
    name: str, zoo: dict[str, ZooProgram], zoo_archives: dict[str, bytes]
) -> None:
    with open_archive(zoo_archives[name]) as archive:
        assert archive.root == "archive"
        assert list(archive.documents) == ["model"]
        assert orjson.loads(archive.documents["model"]) == orjson.loads(torch_json(zoo[name].ep))
        assert archive.pickled == ["archive/data/sample_inputs/model.pt"]
        assert archive.objects == {}


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_tensors_are_torchs_storage(
    name: str, zoo: dict[str, ZooProgram], zoo_archives: dict[str, bytes]
) -> None:
    expected = expected_tensors(zoo[name])
    with open_archive(zoo_archives[name]) as archive:
        assert sorted(archive.tensors) == sorted(expected)
        for fqn, (kind, tensor) in expected.items():
            entry = archive.tensors[fqn]
            assert entry.meta is not None
            assert (entry.kind, entry.use_pickle) == (kind, False)
            raw = archive.tensor(fqn)
            assert raw.kind == kind
            assert raw.data == storage_bytes(tensor)
            assert b"".join(archive.iter_tensor(fqn, chunk=7)) == raw.data
            assert entry.size == len(raw.data)


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_manifest_matches_torch(
    name: str, zoo: dict[str, ZooProgram], zoo_archives: dict[str, bytes]
) -> None:
    expected = expected_tensors(zoo[name])
    with open_archive(zoo_archives[name]) as archive:
        entries = {e.name: e for e in manifest(archive)}
    assert sorted(entries) == sorted(expected)
    for fqn, (kind, tensor) in expected.items():
        data = storage_bytes(tensor)
        entry = entries[fqn]
        assert entry.model_dump() == {
            "name": fqn,
            "kind": kind,
            "dtype": str(tensor.dtype).removeprefix("torch."),
            "shape": list(tensor.shape),
            "strides": list(tensor.stride()),
            "storage_offset": tensor.storage_offset(),
            "nbytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "pickled": False,
        }


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_written_archive_loads_in_torch(
    name: str, zoo: dict[str, ZooProgram], zoo_archives: dict[str, bytes]
) -> None:
    program = zoo[name]
    with open_archive(zoo_archives[name]) as archive:
        out = io.BytesIO()
        write_archive(
            out,
            archive.documents,
            archive.raw_tensors(),
            opaque_members=archive.opaque_members(LIMIT),
        )
        original = manifest(archive)
    data = out.getvalue()
    with open_archive(data) as again:
        assert manifest(again) == original
    loaded = load_with_torch(data)
    assert outputs_close(loaded.module()(*program.args, **program.kwargs), program.run())
    assert loaded.example_inputs is not None


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_written_archive_without_sample_inputs(
    name: str, zoo: dict[str, ZooProgram], zoo_archives: dict[str, bytes]
) -> None:
    program = zoo[name]
    with open_archive(zoo_archives[name]) as archive:
        out = io.BytesIO()
        write_archive(out, archive.documents, archive.raw_tensors())
    with open_archive(out.getvalue()) as again:
        # an empty sample-inputs member is not a pickle: torch reads it as "no inputs"
        assert again.pickled == []
        assert again.reader.member("archive/data/sample_inputs/model.pt").size == 0
    loaded = load_with_torch(out.getvalue())
    assert loaded.example_inputs is None
    assert outputs_close(loaded.module()(*program.args, **program.kwargs), program.run())


def test_written_layout_mirrors_torch(zoo_archives: dict[str, bytes]) -> None:
    source = zoo_archives["linear_bn_train"]
    with open_archive(source) as archive:
        out = io.BytesIO()
        write_archive(
            out,
            archive.documents,
            archive.raw_tensors(),
            opaque_members=archive.opaque_members(LIMIT),
        )
    with ZipReader(source) as theirs, ZipReader(out.getvalue()) as ours:
        assert ours.names == theirs.names
        for member in ours.members.values():
            assert member.data_offset % 64 == 0
            assert member.method == 0
        for name in ours.names:
            if not name.endswith(("_config.json", "serialization_id")):
                assert ours.read_member(name, LIMIT) == theirs.read_member(name, LIMIT), name


def test_writer_is_deterministic(zoo_archives: dict[str, bytes]) -> None:
    with open_archive(zoo_archives["conv"]) as archive:
        outputs = []
        for _ in range(2):
            out = io.BytesIO()
            write_archive(out, archive.documents, archive.raw_tensors())
            outputs.append(out.getvalue())
    assert outputs[0] == outputs[1]


def test_read_from_path_and_file(
    tmp_path: Path, zoo: dict[str, ZooProgram], zoo_archives: dict[str, bytes]
) -> None:
    path = tmp_path / "conv.pt2"
    path.write_bytes(zoo_archives["conv"])
    with open_archive(path) as from_path, open_archive(str(path)) as from_str:
        assert manifest(from_path) == manifest(from_str)
    weight = storage_bytes(zoo["conv"].ep.state_dict["conv.weight"])
    with path.open("rb") as handle:
        with open_archive(handle) as from_file:
            assert from_file.tensor("conv.weight").data == weight
        assert not handle.closed


def test_write_to_path_replaces_atomically(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    zoo: dict[str, ZooProgram],
    zoo_archives: dict[str, bytes],
) -> None:
    target = tmp_path / "model.pt2"
    target.write_bytes(b"previous")
    with open_archive(zoo_archives["conv"]) as archive:
        documents, tensors = archive.documents, archive.raw_tensors()
    with pytest.raises(ArchiveFailure) as failure:
        write_archive(target, documents, [tensors[0], tensors[0]])
    assert failure.value.code == "archive-write-refused"

    def fail(self: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(writer._ZipWriter, "finish", fail)
    with pytest.raises(OSError, match="disk full"):
        write_archive(target, documents, tensors)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt2"]

    monkeypatch.undo()
    write_archive(target, documents, tensors)
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt2"]
    loaded = torch.export.load(target)
    program = zoo["conv"]
    assert outputs_close(loaded.module()(*program.args), program.run())
