"""The fast routes of schema.io: dump through orjson (the bytes must equal pydantic's serializer's)
and the collector's state after a load."""

from __future__ import annotations

import gc
import math

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

import schema
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
    TensorArgument,
)


def _pydantic(doc: BaseModel) -> bytes:
    return doc.__pydantic_serializer__.to_json(doc)


@pytest.mark.parametrize(
    "doc",
    [
        ArgumentAsFloat(as_float=math.inf),
        ArgumentAsFloat(as_float=-math.inf),
        ArgumentAsFloat(as_float=math.nan),
        ArgumentAsFloat(as_float=1e-7),
        ArgumentAsFloats(as_floats=[1.0, math.nan, -math.inf, 2.5, 1e16]),
        ArgumentAsInt(as_int=2**63 - 1),
        ArgumentAsInt(as_int=2**70),  # past 64 bits: orjson refuses, pydantic writes it
        ArgumentAsString(as_string='é\x00\u2028"\\😀'),
        Device(type="cpu"),
        Device.model_validate_json(b'{"type": "cpu", "index": 0, "unknown": [1, "NaN"]}'),
        TensorArgument.model_validate_json(b'{"name": "x", "extra": {"nested": 1}}'),
        # arms orjson writes without the callback, holding structs with and without extras
        ArgumentAsTensor.model_validate_json(b'{"as_tensor": {"name": "x", "extra": 1}}'),
        ArgumentAsTensors(as_tensors=[TensorArgument(name="a"), TensorArgument(name="b")]),
        ArgumentAsStringToArgument(as_string_to_argument={"k": ArgumentAsFloat(as_float=math.nan)}),
    ],
    ids=repr,
)
def test_same_bytes_as_pydantic(doc: BaseModel) -> None:
    assert schema.dump(doc) == _pydantic(doc)


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
        doc = schema.load(zoo_json["conv"])
        assert gc.isenabled() is enabled
        # in the oldest generation, young collections after the load do not walk the models
        oldest = gc.get_objects(generation=2)
        assert any(o is doc for o in oldest)
        assert any(o is doc.graph_module.graph.nodes[0] for o in oldest)
    finally:
        (gc.enable if was else gc.disable)()
