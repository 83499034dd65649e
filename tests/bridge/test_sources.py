"""Tensor sources: what a torch job reads, from an archive or a safetensors file, by name."""

from __future__ import annotations

from pathlib import Path

import pytest

import schema
from app.archive import ArchiveFailure, RawTensor, write_archive
from app.bridge.exported import SerializedProgram
from app.failure import BridgeFailure
from app.settings import Limits
from app.tensors.safetensors_io import from_safetensors, to_safetensors
from app.tensors.sources import TensorSource


def _file(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", ["conv", "constants", "dtypes", "linear_bn_train"])
def test_an_archive_reads_as_torch_wrote_it(
    name: str,
    serialized: dict[str, SerializedProgram],
    archives: dict[str, bytes],
    tmp_path: Path,
) -> None:
    expected = serialized[name].tensors
    names = {fqn: fqn for fqn in expected}
    by_path = TensorSource(archive=_file(tmp_path, "program.pt2", archives[name]), names=names)
    assert by_path.read() == expected
    assert len(by_path) == len(expected)
    assert TensorSource(archive=archives[name], names=names).read() == expected


def test_names_pick_and_rename(
    serialized: dict[str, SerializedProgram], archives: dict[str, bytes]
) -> None:
    source = TensorSource(archive=archives["conv"], names={"fc.weight": "head.weight"})
    stored = serialized["conv"].tensors["fc.weight"]
    assert source.read() == {
        "head.weight": RawTensor("head.weight", stored.kind, stored.meta, stored.data)
    }


def test_names_the_archive_lacks_are_left_to_the_weights_check(
    archives: dict[str, bytes],
) -> None:
    assert TensorSource(archive=archives["conv"], names={"ghost": "ghost"}).read() == {}


def test_tensors_sharing_a_member_share_its_bytes(
    serialized: dict[str, SerializedProgram], tmp_path: Path
) -> None:
    program = serialized["conv"]
    weight = program.tensors["fc.weight"]
    alias = RawTensor("alias", "buffer", weight.meta, weight.data)
    path = tmp_path / "tied.pt2"
    write_archive(path, {"model": schema.dump(program.doc)}, [weight, alias])
    read = TensorSource(archive=path, names={"fc.weight": "fc.weight", "alias": "alias"}).read()
    assert read["alias"].data is read["fc.weight"].data
    assert read["alias"] == alias


def test_archives_are_opened_under_the_given_limits(archives: dict[str, bytes]) -> None:
    source = TensorSource(archive=archives["conv"], names={}, limits=Limits(max_members=2))
    with pytest.raises(ArchiveFailure) as caught:
        source.read()
    assert caught.value.code == "archive-too-many-members"


def test_a_safetensors_file_by_path_or_bytes(
    serialized: dict[str, SerializedProgram], tmp_path: Path
) -> None:
    data = to_safetensors(serialized["dtypes"].tensors.values())
    path = _file(tmp_path, "weights.safetensors", data)
    for source in (TensorSource(safetensors=path), TensorSource(safetensors=data)):
        assert source.read() == from_safetensors(data)
        assert len(source) == len(serialized["dtypes"].tensors)


def test_a_bad_safetensors_file_fails_when_counted_or_read(tmp_path: Path) -> None:
    source = TensorSource(safetensors=_file(tmp_path, "bad.safetensors", b"\xff" * 16))
    for use in (len, TensorSource.read):
        with pytest.raises(BridgeFailure) as caught:
            use(source)
        assert caught.value.code == "safetensors-invalid"


def test_no_source_is_no_tensors() -> None:
    assert TensorSource().read() == {}
    assert len(TensorSource()) == 0


def test_an_archive_or_a_safetensors_file_not_both(archives: dict[str, bytes]) -> None:
    with pytest.raises(ValueError, match="not both"):
        TensorSource(archive=archives["conv"], safetensors=b"")
