"""The fast routes of schema.io: dump through orjson (the bytes must equal pydantic's serializer's)
and the collector's state after a load."""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from typing import Annotated

import orjson
import pytest
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

import schema
from schema._base import Struct, Wire
from schema._wire import write_natively
from schema.models import (
    ArgumentAsFloat,
    ArgumentAsFloatLists,
    ArgumentAsFloats,
    ArgumentAsInt,
    ArgumentAsString,
    ArgumentAsStringToArgument,
    ArgumentAsTensor,
    ArgumentAsTensors,
    Device,
    ExportedProgram,
    NamedArgument,
    Node,
    TensorArgument,
)


class _SubArgument(TensorArgument):
    """A subclass of a natively written class: written through the checking callback."""


def _pydantic(doc: BaseModel) -> bytes:
    return doc.__pydantic_serializer__.to_json(doc)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ArgumentAsFloat(as_float=math.inf),
        lambda: ArgumentAsFloat(as_float=-math.inf),
        lambda: ArgumentAsFloat(as_float=math.nan),
        lambda: ArgumentAsFloat(as_float=1e-7),
        lambda: ArgumentAsFloats(as_floats=[1.0, math.nan, -math.inf, 2.5, 1e16]),
        lambda: ArgumentAsInt(as_int=2**63 - 1),
        lambda: ArgumentAsInt(as_int=2**70),  # past 64 bits: orjson refuses, pydantic writes it
        lambda: ArgumentAsString(as_string='é\x00\u2028"\\😀'),
        lambda: Device(type="cpu"),
        lambda: Device.model_validate_json(
            b'{"type": "cpu", "index": 0, "unknown": [1, "NaN"]}', extra="allow"
        ),
        lambda: schema.load(b'{"name": "x", "extra": {"nested": 1}}', TensorArgument),
        # arms orjson writes without the callback, holding structs with and without extras
        lambda: schema.load(b'{"as_tensor": {"name": "x", "extra": 1}}', ArgumentAsTensor),
        lambda: ArgumentAsTensors(as_tensors=[TensorArgument(name="a"), TensorArgument(name="b")]),
        lambda: ArgumentAsStringToArgument(
            as_string_to_argument={"k": ArgumentAsFloat(as_float=math.nan)}
        ),
        # models that lack a field or hold an unknown one in their __dict__
        lambda: Device.model_construct(index=1),  # type: ignore[call-arg]
        lambda: TensorArgument.model_construct(name="x", shadow=1),
        lambda: TensorArgument(name="x").model_copy(update={"shadow": 2}),
        lambda: _SubArgument.model_construct(name="x", shadow=3),
    ],
)
def test_same_bytes_as_pydantic(make: Callable[[], BaseModel]) -> None:
    doc = make()
    assert schema.dump(doc) == _pydantic(doc)


def test_unknown_keys_of_a_read_document_are_written() -> None:
    node = {"target": "t", "inputs": [], "outputs": [], "metadata": {}, "later": [1]}
    named = {"name": "a", "arg": {"as_none": True}, "kind": 1, "newer": "x"}
    data = orjson.dumps({**node, "inputs": [named]})
    read = schema.read(data, Node)
    assert read.unknown_fields == ["/inputs/0/newer", "/later"]
    assert schema.dump(read.document) == _pydantic(read.document)
    written = orjson.loads(schema.dump(read.document))
    assert written["later"] == [1]
    assert written["inputs"][0]["newer"] == "x"
    # and a model of the same class without extras is still written exactly
    assert schema.dump(NamedArgument(name="b", arg=ArgumentAsInt(as_int=1))) == _pydantic(
        NamedArgument(name="b", arg=ArgumentAsInt(as_int=1))
    )


class _Probe(Struct):
    name: Annotated[str, Wire(10)]
    size: Annotated[int | None, Wire(20)] = None


class _Holder(Struct):
    probes: Annotated[list[_Probe], Wire(10)]


def _assigned(probe: _Probe) -> _Probe:
    probe.x = 1
    return probe


@pytest.mark.parametrize(
    "make",
    [
        lambda: _Probe.model_validate_json(b'{"name": "p", "x": 1}', extra="allow"),
        lambda: _Probe.model_validate({"name": "p", "x": 1}, extra="allow"),
        lambda: _Probe.model_validate_strings({"name": "p", "x": "1"}, extra="allow"),
        lambda: _Probe.model_construct(name="p", x=1),
        lambda: _Probe.model_construct(size=1),  # type: ignore[call-arg]
        lambda: _Probe(name="p").model_copy(update={"x": 1}),
        lambda: _Probe(name="p", x=1),
        lambda: _assigned(_Probe(name="p")),
        lambda: _Holder(probes=[_Probe(name="p"), {"name": "q", "x": 1}]).probes[1],  # type: ignore[list-item]
    ],
)
def test_a_model_with_extras_or_missing_fields_unmarks_its_class(
    make: Callable[[], _Probe],
) -> None:
    write_natively(_Probe)
    _Probe.model_validate_json(b'{"name": "p"}')
    _Probe.model_construct(name="p", size=None)
    _Holder(probes=[_Probe(name="p"), {"name": "q"}])  # type: ignore[list-item]
    _Probe(name="p").size = 2
    assert "__dataclass_fields__" in vars(_Probe)  # exact models keep the mark
    doc = make()
    assert "__dataclass_fields__" not in vars(_Probe)
    assert schema.dump(doc) == _pydantic(doc)


def test_sorted_dump_sorts_the_keys_of_every_model(zoo_json: dict[str, bytes]) -> None:
    doc: ExportedProgram = schema.load(zoo_json["conv"])
    data = schema.io.dump_sorted(doc)
    assert data == orjson.dumps(orjson.loads(schema.dump(doc)), option=orjson.OPT_SORT_KEYS)


def test_non_finite_floats_in_nested_lists() -> None:
    doc = ArgumentAsFloatLists(as_float_lists=[[math.inf, 0.5], [], [math.nan]])
    assert schema.dump(doc) == _pydantic(doc)
    assert b'"Infinity"' in schema.dump(doc)
    assert b"null" not in schema.dump(doc)


def test_zoo_documents(zoo_json: dict[str, bytes]) -> None:
    for name, data in zoo_json.items():
        doc = schema.load(data, ExportedProgram)
        assert schema.dump(doc) == _pydantic(doc), name


def test_a_lone_surrogate_still_raises_as_before() -> None:
    with pytest.raises(PydanticSerializationError):
        schema.dump(ArgumentAsString(as_string="\ud800"))


@pytest.mark.parametrize("enabled", [True, False])
def test_load_restores_the_collector_and_leaves_the_models_old(
    zoo_json: dict[str, bytes], enabled: bool
) -> None:
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        doc: ExportedProgram = schema.load(zoo_json["conv"])
        assert gc.isenabled() is enabled
        # in the oldest generation, young collections after the load do not walk the models
        oldest = gc.get_objects(generation=2)
        assert any(o is doc for o in oldest)
        assert any(o is doc.graph_module.graph.nodes[0] for o in oldest)
    finally:
        (gc.enable if was else gc.disable)()
