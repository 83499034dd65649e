"""write_archive: torch's layout, aliasing, several models, zip64, and what it refuses."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable

import pytest
import torch
from torch.export.pt2_archive._package import load_pt2, package_pt2

from app.archive import ArchiveFailure, RawTensor, ZipReader, open_archive, write_archive, writer
from schema import ScalarType
from tests.zoo import ZooProgram, archive_bytes, outputs_close

MiB = 1024 * 1024


def refused(code: str, action: Callable[[], object]) -> ArchiveFailure:
    """Run `action`, which must raise ArchiveFailure with exactly `code`."""
    with pytest.raises(ArchiveFailure) as failure:
        action()
    assert failure.value.code == code, str(failure.value)
    return failure.value


def written(
    documents: dict[str, bytes],
    tensors: list[RawTensor],
    opaque: dict[str, bytes] | None = None,
) -> bytes:
    """write_archive into memory."""
    out = io.BytesIO()
    write_archive(out, documents, tensors, opaque_members=opaque)
    return out.getvalue()


class Tied(torch.nn.Module):
    """Two names for one linear layer: torch stores its weights once."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(3, 3)
        self.second = self.first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.first(x) * self.second(x)
        return out


def test_aliasing_survives() -> None:
    torch.manual_seed(0)
    args = (torch.randn(2, 3),)
    ep = torch.export.export(Tied(), args, strict=False)
    with open_archive(archive_bytes(ep)) as archive:
        data = written(archive.documents, archive.raw_tensors())
    with ZipReader(data) as reader:
        weights = [n for n in reader.names if "/weights/weight_" in n]
    assert weights == ["archive/data/weights/weight_0", "archive/data/weights/weight_1"]
    loaded = torch.export.load(io.BytesIO(data))
    state = loaded.state_dict
    assert state["first.weight"].data_ptr() == state["second.weight"].data_ptr()
    assert outputs_close(loaded.module()(*args), ep.module()(*args))


def test_equal_bytes_are_not_aliased(zoo_archives: dict[str, bytes]) -> None:
    """Equal contents in distinct objects stay distinct members (a mutation must not leak)."""
    with open_archive(zoo_archives["linear_bn_train"]) as archive:
        tensors = archive.raw_tensors()
        data = written(archive.documents, tensors)
    assert tensors[3].data == tensors[4].data  # bn.bias and bn.running_mean: zeros
    with open_archive(data) as again:
        members = [t.member for t in again.tensors.values()]
    assert len(set(members)) == len(members) == 7


def test_one_bytes_object_with_two_dtypes_is_two_members(zoo_archives: dict[str, bytes]) -> None:
    with open_archive(zoo_archives["conv"]) as archive:
        bias = archive.tensor("conv.bias")
        documents = archive.documents
    as_int = RawTensor(
        "int_bias", "buffer", bias.meta.model_copy(update={"dtype": ScalarType.INT}), bias.data
    )
    with open_archive(written(documents, [bias, as_int])) as again:
        assert again.tensors["conv.bias"].member != again.tensors["int_bias"].member


def test_several_models_round_trip(zoo: dict[str, ZooProgram]) -> None:
    out = io.BytesIO()
    package_pt2(out, exported_programs={"first": zoo["conv"].ep, "second": zoo["constants"].ep})
    with open_archive(out.getvalue()) as archive:
        data = written(archive.documents, archive.raw_tensors(), archive.opaque_members(MiB))
    loaded = load_pt2(io.BytesIO(data)).exported_programs
    assert sorted(loaded) == ["first", "second"]
    for model, program in (("first", zoo["conv"]), ("second", zoo["constants"])):
        assert outputs_close(loaded[model].module()(*program.args), program.run())


def test_forced_zip64_is_read_by_everyone(
    monkeypatch: pytest.MonkeyPatch, zoo: dict[str, ZooProgram], zoo_archives: dict[str, bytes]
) -> None:
    """Every member and offset written as zip64 (as archives over 4 GiB need)."""
    monkeypatch.setattr(writer, "_ZIP64_LIMIT", 0)
    with open_archive(zoo_archives["conv"]) as archive:
        data = written(archive.documents, archive.raw_tensors(), archive.opaque_members(MiB))
        expected = {n: archive.reader.read_member(n, MiB) for n in archive.reader.names}
    with zipfile.ZipFile(io.BytesIO(data)) as theirs:
        assert theirs.testzip() is None
        assert all(info.extra.startswith(b"\x01\x00") for info in theirs.infolist())
    with ZipReader(data) as reader:
        for name, content in expected.items():
            if not name.endswith(("_config.json", "serialization_id")):
                assert reader.read_member(name, MiB) == content
    loaded = torch.export.load(io.BytesIO(data))
    assert outputs_close(loaded.module()(*zoo["conv"].args), zoo["conv"].run())


def test_extra_files_round_trip(zoo_archives: dict[str, bytes]) -> None:
    with open_archive(zoo_archives["conv"]) as archive:
        opaque = {"extra/notes.txt": b"hello", "data/sample_inputs/model.pt": b""}
        data = written(archive.documents, archive.raw_tensors(), opaque)
    extra_files = {"notes.txt": ""}
    torch.export.load(io.BytesIO(data), extra_files=extra_files)
    assert extra_files == {"notes.txt": "hello"}


@pytest.mark.parametrize(
    ("documents", "names", "opaque", "code"),
    [
        ({}, [], {}, "archive-write-refused"),
        ({"a/b": b"{}"}, [], {}, "archive-write-refused"),
        ({"": b"{}"}, [], {}, "archive-write-refused"),
        ({"a\\b": b"{}"}, [], {}, "archive-bad-name"),
        ({"model": b"{}"}, ["w", "w"], {}, "archive-write-refused"),
        ({"a": b"{}", "b": b"{}"}, ["w"], {}, "archive-write-refused"),
        ({"a": b"{}", "b": b"{}"}, ["c/w"], {}, "archive-write-refused"),
        ({"model": b"{}"}, [], {"data/weights/weight_0": b""}, "archive-write-refused"),
        ({"model": b"{}"}, [], {"data/sample_inputs/other.pt": b""}, "archive-write-refused"),
        ({"model": b"{}"}, [], {"extra/": b""}, "archive-write-refused"),
        ({"model": b"{}"}, [], {"extra/../../x": b""}, "archive-bad-name"),
    ],
)
def test_refusals(
    documents: dict[str, bytes],
    names: list[str],
    opaque: dict[str, bytes],
    code: str,
    zoo_archives: dict[str, bytes],
) -> None:
    with open_archive(zoo_archives["conv"]) as archive:
        bias = archive.tensor("conv.bias")
    tensors = [RawTensor(n, "buffer", bias.meta, bias.data) for n in names]
    refused(code, lambda: written(documents, tensors, opaque))


def test_refuses_tensors_that_do_not_fit(zoo_archives: dict[str, bytes]) -> None:
    with open_archive(zoo_archives["conv"]) as archive:
        bias = archive.tensor("conv.bias")
        documents = archive.documents
    short = RawTensor("conv.bias", "parameter", bias.meta, bias.data[:-4])
    refused("archive-tensor-size-mismatch", lambda: written(documents, [short]))
    refused("archive-write-refused", lambda: write_archive(io.BytesIO(), documents, [], root="a/b"))


def test_a_pickled_payload_is_carried_as_it_is(zoo_archives: dict[str, bytes]) -> None:
    # a tensor-subclass payload is opaque: its bytes are no storage of its meta's view
    with open_archive(zoo_archives["conv"]) as archive:
        tensors = archive.raw_tensors()
        documents = archive.documents
    first = tensors[0]
    payload = b"not a storage: a pickle never read here"
    carried = RawTensor(first.name, "parameter", first.meta, payload, pickled=True)
    with open_archive(written(documents, [carried, *tensors[1:]])) as out:
        entry = out.tensors[first.name]
        assert (entry.use_pickle, entry.kind, entry.meta) == (True, "parameter", first.meta)
        assert out.reader.read_member(entry.member, entry.size) == payload
        assert out.pickled == [entry.member]
