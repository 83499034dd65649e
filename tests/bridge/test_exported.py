"""serialize / deserialize / write_pt2 / save_pt2 against torch as the oracle, on every zoo
program."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch
from torch import nn
from torch._export.serde import schema as torch_schema
from torch._export.serde import serialize as torch_serde

import schema
from app.archive.raw import RawTensor
from app.bridge.exported import (
    SerializedProgram,
    deserialize,
    load_pt2_trusted,
    pt2_bytes,
    save_pt2,
    saved_document,
    serialize,
    write_pt2,
)
from app.bridge.torch_schema import to_torch
from app.failure import BridgeFailure
from schema import Issue, ScalarType, SymIntAsInt
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes, outputs_close, torch_json

ROOT = "archive/data"


class Strided(nn.Module):
    """A transposed parameter, and two buffers sharing one storage (one a window at an offset)."""

    window: torch.Tensor
    whole: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        base = torch.arange(24, dtype=torch.float32).reshape(6, 4)
        self.weight = nn.Parameter(torch.randn(4, 3).t())
        self.register_buffer("window", base[2:5])
        self.register_buffer("whole", base)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.window.sum(0) + self.whole[0]


@pytest.fixture(scope="module")
def strided() -> ZooProgram:
    """A program whose tensors are non-contiguous, offset and aliased."""
    torch.manual_seed(0)
    args = (torch.randn(2, 3),)
    ep = torch.export.export(Strided(), args, strict=False)
    return ZooProgram("strided", ep, args)


def _archive_tensors(archive: bytes) -> dict[str, tuple[str, schema.PayloadMeta, bytes]]:
    """Each payload torch.export.save wrote: (directory, its config entry, its file's bytes)."""
    found: dict[str, tuple[str, schema.PayloadMeta, bytes]] = {}
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        for folder in ("weights", "constants"):
            config_json = zf.read(f"{ROOT}/{folder}/model_{folder}_config.json")
            config = schema.load(config_json, schema.PayloadConfig)
            for fqn, payload in config.config.items():
                found[fqn] = (folder, payload, zf.read(f"{ROOT}/{folder}/{payload.path_name}"))
    return found


def _assert_tensors_match_archive(tensors: dict[str, RawTensor], archive: bytes) -> None:
    stored = _archive_tensors(archive)
    assert set(tensors) == set(stored)
    for name, (folder, payload, data) in stored.items():
        raw = tensors[name]
        expected_kind = (
            "constant" if folder == "constants" else "parameter" if payload.is_param else "buffer"
        )
        assert (raw.name, raw.kind) == (name, expected_kind)
        assert raw.meta == payload.tensor_meta
        assert raw.data == data


def _assert_same_tensors(built: torch.export.ExportedProgram, original: ZooProgram) -> None:
    for mine, theirs in (
        (built.state_dict, original.ep.state_dict),
        (built.constants, original.ep.constants),
    ):
        assert set(mine) == set(theirs)
        for name, tensor in theirs.items():
            assert isinstance(tensor, torch.Tensor)
            copy = mine[name]
            assert isinstance(copy, torch.Tensor)
            assert type(copy) is type(tensor)
            assert (copy.dtype, copy.shape, copy.stride()) == (
                tensor.dtype,
                tensor.shape,
                tensor.stride(),
            )
            assert copy.requires_grad == tensor.requires_grad
            assert torch.equal(copy.detach(), tensor.detach())


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_document_is_torch_serializer_output(
    name: str, zoo: dict[str, ZooProgram], serialized: dict[str, SerializedProgram]
) -> None:
    program = serialized[name]
    assert program.json == torch_json(zoo[name].ep)
    assert program.doc == schema.load(program.json)


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_raw_tensors_are_what_torch_export_save_writes(
    name: str, serialized: dict[str, SerializedProgram], archives: dict[str, bytes]
) -> None:
    _assert_tensors_match_archive(serialized[name].tensors, archives[name])


def test_strided_tensors_are_whole_storages_as_torch_writes_them(strided: ZooProgram) -> None:
    program = serialize(strided.ep)
    # torch warns when a storage group has no contiguous member (the transposed parameter).
    with pytest.warns(UserWarning, match="No complete tensor found"):
        archive = archive_bytes(strided.ep)
    _assert_tensors_match_archive(program.tensors, archive)
    window = program.tensors["window"]
    assert window.meta.storage_offset == SymIntAsInt(as_int=8)
    assert len(window.data) == 24 * 4
    assert program.tensors["whole"].data == window.data
    assert program.tensors["weight"].meta.strides == [SymIntAsInt(as_int=1), SymIntAsInt(as_int=3)]


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_round_trip_computes_the_same(
    name: str, zoo: dict[str, ZooProgram], serialized: dict[str, SerializedProgram]
) -> None:
    program = zoo[name]
    built = deserialize(serialized[name].doc, serialized[name].tensors)
    _assert_same_tensors(built, program)
    assert outputs_close(built.module()(*program.args, **program.kwargs), program.run())


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_round_trip_serializes_as_torch_round_trip_does(
    name: str, zoo: dict[str, ZooProgram], serialized: dict[str, SerializedProgram]
) -> None:
    built = deserialize(serialized[name].doc, serialized[name].tensors)
    again = serialize(built)
    # torch's own serialize -> deserialize is the oracle (it drops some view offsets itself).
    by_torch = torch_serde.deserialize(torch_serde.serialize(zoo[name].ep))
    assert schema.dump(again.doc) == schema.dump(serialize(by_torch).doc)
    assert again.tensors == serialized[name].tensors


def test_strided_round_trip(strided: ZooProgram) -> None:
    program = serialize(strided.ep)
    built = deserialize(program.doc, program.tensors)
    _assert_same_tensors(built, strided)
    assert built.state_dict["window"].storage_offset() == 8
    assert outputs_close(built.module()(*strided.args), strided.run())


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_fast_route_builds_what_torch_route_builds(
    name: str, zoo: dict[str, ZooProgram], serialized: dict[str, SerializedProgram]
) -> None:
    doc = serialized[name].doc
    fast = to_torch(doc)
    slow = torch_serde._bytes_to_dataclass(torch_schema.ExportedProgram, schema.dump(doc))
    assert fast == slow
    assert torch_serde._to_json_bytes(fast) == torch_serde._to_json_bytes(slow)
    by_torch = deserialize(doc, serialized[name].tensors, route="torch")
    by_us = deserialize(doc, serialized[name].tensors, route="fast")
    assert by_us.graph_module.code == by_torch.graph_module.code
    assert str(by_us.graph_signature) == str(by_torch.graph_signature)
    program = zoo[name]
    assert outputs_close(
        by_us.module()(*program.args, **program.kwargs),
        by_torch.module()(*program.args, **program.kwargs),
    )


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_save_pt2_then_torch_load(
    name: str, tmp_path: Path, zoo: dict[str, ZooProgram], serialized: dict[str, SerializedProgram]
) -> None:
    program = zoo[name]
    target = tmp_path / f"{name}.pt2"
    save_pt2(deserialize(serialized[name].doc, serialized[name].tensors), target)
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    loaded = load_pt2_trusted(target)
    assert outputs_close(loaded.module()(*program.args, **program.kwargs), program.run())


def test_pt2_bytes_load_in_torch(zoo: dict[str, ZooProgram]) -> None:
    program = zoo["dtypes"]
    loaded = torch.export.load(io.BytesIO(pt2_bytes(program.ep)))
    assert outputs_close(loaded.module()(*program.args), program.run())


def _members(archive: bytes) -> dict[str, Any]:
    """Root-relative members; tensors keyed by name with their config entry, since torch numbers
    its tensor files in the order of its state dict and constants, ours in the given order."""
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        raw = {n.split("/", 1)[1]: zf.read(n) for n in zf.namelist()}
    out: dict[str, Any] = {}
    for name, data in raw.items():
        folder, _, file = name.rpartition("/")
        if file.endswith("_config.json"):
            for tensor, entry in orjson.loads(data)["config"].items():
                out[f"{folder}:{tensor}"] = (entry, raw[f"{folder}/{entry.pop('path_name')}"])
        elif not file.startswith(("weight_", "tensor_")) and name != ".data/serialization_id":
            out[name] = data
    return out


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_write_pt2_writes_what_torch_export_save_writes(
    name: str, zoo: dict[str, ZooProgram], serialized: dict[str, SerializedProgram]
) -> None:
    out = io.BytesIO()
    built = write_pt2(serialized[name].doc, serialized[name].tensors, out)
    # torch.export.save of the program torch built: what the service wrote before
    assert _members(out.getvalue()) == _members(pt2_bytes(built))
    loaded = torch.export.load(io.BytesIO(out.getvalue()))
    program = zoo[name]
    assert outputs_close(loaded.module()(*program.args, **program.kwargs), program.run())


def _reverse_value_maps(graph: dict[str, Any]) -> None:
    for key in ("tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values"):
        graph[key] = dict(reversed(graph[key].items()))
    for node in graph["nodes"]:
        for named in node["inputs"]:
            if "as_graph" in named["arg"]:
                _reverse_value_maps(named["arg"]["as_graph"]["graph"])


@pytest.mark.parametrize("name", ["cond", "multi_out", "symint_out", "dynamic"])
def test_values_are_saved_in_the_order_torch_defines_them(
    name: str, serialized: dict[str, SerializedProgram]
) -> None:
    data = orjson.loads(schema.dump(serialized[name].doc))
    _reverse_value_maps(data["graph_module"]["graph"])
    doc = schema.load(orjson.dumps(data))
    assert schema.dump(doc) != schema.dump(serialized[name].doc)
    out = io.BytesIO()
    built = write_pt2(doc, serialized[name].tensors, out)
    assert _members(out.getvalue()) == _members(pt2_bytes(built))


def test_write_pt2_places_tensors_by_the_signature_not_their_kind(
    serialized: dict[str, SerializedProgram],
) -> None:
    program = serialized["constants"]
    # as a safetensors file without our metadata says: every tensor a buffer
    buffers = {n: RawTensor(n, "buffer", t.meta, t.data) for n, t in program.tensors.items()}
    ours, expected = io.BytesIO(), io.BytesIO()
    write_pt2(program.doc, buffers, ours)
    write_pt2(program.doc, program.tensors, expected)
    members = _members(ours.getvalue())
    assert members == _members(expected.getvalue())
    assert {"data/constants:offset", "data/constants:table"} <= set(members)


def test_write_pt2_of_strided_aliased_tensors(strided: ZooProgram) -> None:
    program = serialize(strided.ep)
    out = io.BytesIO()
    built = write_pt2(program.doc, program.tensors, out)
    with pytest.warns(UserWarning, match="No complete tensor found"):
        theirs = pt2_bytes(built)
    assert _members(out.getvalue()) == _members(theirs)
    loaded = torch.export.load(io.BytesIO(out.getvalue()))
    assert loaded.state_dict["window"].storage_offset() == 8
    assert outputs_close(loaded.module()(*strided.args), strided.run())


def test_saved_document_zeroes_value_offsets_as_torch_does(
    serialized: dict[str, SerializedProgram], archives: dict[str, bytes]
) -> None:
    doc = serialized["multi_out"].doc
    offsets = {
        value: meta.storage_offset.as_int
        for value, meta in doc.graph_module.graph.tensor_values.items()
        if isinstance(meta.storage_offset, SymIntAsInt)
    }
    assert any(offsets.values()), "the split's outputs are views at an offset"
    # torch's load + save is the oracle: it loses the offsets of values, never of weights
    by_torch = pt2_bytes(torch.export.load(io.BytesIO(archives["multi_out"])))
    with zipfile.ZipFile(io.BytesIO(by_torch)) as zf:
        assert saved_document(doc) == zf.read("archive/models/model.json")
    saved: schema.ExportedProgram = schema.load(saved_document(doc))
    values = saved.graph_module.graph.tensor_values
    assert {v: m.storage_offset for v, m in values.items()} == dict.fromkeys(
        offsets, SymIntAsInt(as_int=0)
    )


def test_write_pt2_writes_nothing_torch_cannot_build(
    serialized: dict[str, SerializedProgram], tmp_path: Path
) -> None:
    program = serialized["conv"]
    tensors = dict(program.tensors)
    del tensors["conv.bias"]
    target = tmp_path / "program.pt2"
    with pytest.raises(BridgeFailure) as caught:
        write_pt2(program.doc, tensors, target)
    assert caught.value.code == "weights-mismatch"
    assert list(tmp_path.iterdir()) == []


def test_save_pt2_replaces_an_existing_file(tmp_path: Path, zoo: dict[str, ZooProgram]) -> None:
    target = tmp_path / "model.pt2"
    target.write_bytes(b"old")
    save_pt2(zoo["conv"].ep, target)
    assert zipfile.is_zipfile(target)
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt2"]


def test_weights_mismatch_lists_every_problem(serialized: dict[str, SerializedProgram]) -> None:
    program = serialized["conv"]
    tensors = dict(program.tensors)
    del tensors["conv.bias"]
    weight = tensors["conv.weight"]
    tensors["conv.weight"] = RawTensor(
        weight.name,
        weight.kind,
        weight.meta.model_copy(update={"sizes": weight.meta.sizes[:2]}),
        weight.data,
    )
    fc = tensors["fc.weight"]
    tensors["fc.weight"] = RawTensor(
        fc.name, fc.kind, fc.meta.model_copy(update={"dtype": ScalarType.DOUBLE}), fc.data
    )
    # tensors no input spec names are no mismatch: torch.export.load keeps them
    tensors["extra"] = RawTensor("extra", "buffer", fc.meta, fc.data)
    tensors["more"] = RawTensor("more", "constant", fc.meta, fc.data)
    with pytest.raises(BridgeFailure) as caught:
        deserialize(program.doc, tensors)
    assert caught.value.code == "weights-mismatch"
    assert caught.value.issues == [
        Issue("weight-shape", "/conv.weight", "expected shape [4, 3, 3, 3], got [4, 3]"),
        Issue("weight-missing", "/conv.bias", "parameter 'conv.bias' (float32[4]) has no tensor"),
        Issue("weight-dtype", "/fc.weight", "expected dtype float32, got float64"),
    ]


def test_tensors_no_spec_names_are_kept_as_stored(
    serialized: dict[str, SerializedProgram],
) -> None:
    program = serialized["conv"]
    fc = program.tensors["fc.weight"]
    tensors = {
        **program.tensors,
        "extra": RawTensor("extra", "parameter", fc.meta, fc.data),
        "more": RawTensor("more", "constant", fc.meta, fc.data),
    }
    built = deserialize(program.doc, tensors)
    assert isinstance(built.state_dict["extra"], torch.nn.Parameter)
    assert torch.equal(built.state_dict["extra"], built.state_dict["fc.weight"])
    assert "more" in built.constants
    assert "more" not in built.state_dict


def test_weights_mismatch_names_buffers_and_constants(
    serialized: dict[str, SerializedProgram],
) -> None:
    with pytest.raises(BridgeFailure) as caught:
        deserialize(serialized["constants"].doc, {})
    assert caught.value.code == "weights-mismatch"
    assert caught.value.issues == [
        Issue("weight-missing", "/offset", "buffer 'offset' (float32[4]) has no tensor"),
        Issue("weight-missing", "/table", "constant 'table' (float32[3, 4]) has no tensor"),
    ]


def test_short_tensor_data_is_refused(serialized: dict[str, SerializedProgram]) -> None:
    tensors = dict(serialized["conv"].tensors)
    bias = tensors["conv.bias"]
    tensors["conv.bias"] = RawTensor(bias.name, bias.kind, bias.meta, bias.data[:8])
    weight = tensors["fc.bias"]
    tensors["fc.bias"] = RawTensor(weight.name, weight.kind, weight.meta, weight.data + b"\x00")
    with pytest.raises(BridgeFailure) as caught:
        deserialize(serialized["conv"].doc, tensors)
    assert caught.value.code == "tensor-data-invalid"
    assert caught.value.issues == [
        Issue("tensor-data-short", "/conv.bias", "the view needs 4 elements, the data holds 2"),
        Issue(
            "tensor-data-misaligned",
            "/fc.bias",
            "21 bytes is not a whole number of 4-byte elements",
        ),
    ]


def test_non_tensor_constant_is_refused() -> None:
    class Plain(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    ep = torch.export.export(Plain(), (torch.ones(2),), strict=False)
    ep.constants["opaque"] = object()
    with pytest.raises(BridgeFailure) as caught:
        serialize(ep)
    assert caught.value.code == "bridge-unsupported-constant"
    assert caught.value.issues == [
        Issue("bridge-unsupported-constant", "/opaque", "constant of type object is not a tensor")
    ]


def test_script_object_input_is_refused(serialized: dict[str, SerializedProgram]) -> None:
    program = serialized["conv"]
    data = program.doc.model_dump(mode="json")
    specs = data["graph_module"]["signature"]["input_specs"]
    specs.append(
        {
            "custom_obj": {
                "arg": {"name": "obj", "class_fqn": "__torch__.torch.classes.demo.Holder"},
                "custom_obj_name": "holder",
            }
        }
    )
    doc = schema.ExportedProgram.model_validate(data, strict=False)
    with pytest.raises(BridgeFailure) as caught:
        deserialize(doc, program.tensors)
    assert caught.value.code == "bridge-unsupported-constant"
    assert caught.value.issues == [
        Issue(
            "bridge-unsupported-constant",
            f"/graph_module/signature/input_specs/{len(specs) - 1}/custom_obj",
            "script object 'holder' (__torch__.torch.classes.demo.Holder) cannot be built "
            "without unpickling",
        )
    ]


def test_torch_errors_become_one_line_failures(serialized: dict[str, SerializedProgram]) -> None:
    program = serialized["conv"]
    data = program.doc.model_dump(mode="json")
    data["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"] = {"as_tensor": {"name": "ghost"}}
    doc = schema.ExportedProgram.model_validate(data, strict=False)
    with pytest.raises(BridgeFailure) as caught:
        deserialize(doc, program.tensors)
    assert caught.value.code == "torch-deserialize-failed"
    assert "\n" not in caught.value.message
    assert "ghost" in caught.value.message
