"""Float fields written natively by schema.dump: a NaN or infinity is never a plain float there,
whichever way it came in, so orjson (which writes those as null) never sees one."""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable

import orjson
import pytest
from pydantic import BaseModel

import schema
from schema._wire import NonFinite, layout, write_natively
from schema.models import (
    ArgumentAsFloat,
    ArgumentAsFloatLists,
    ArgumentAsFloats,
    ArgumentKind,
    ComplexValue,
    NamedArgument,
    Node,
)


def _pydantic(doc: BaseModel) -> bytes:
    return doc.__pydantic_serializer__.to_json(doc)


def _assigned(value: float) -> ArgumentAsFloat:
    arg = ArgumentAsFloat(as_float=0.5)
    arg.as_float = value
    return arg


@pytest.fixture(autouse=True)
def _marked() -> None:
    # other tests may have unmarked the class for good (extras); these test the native route
    write_natively(ArgumentAsFloat)
    write_natively(ComplexValue)


def test_only_classes_with_float_lists_need_the_callback() -> None:
    assert layout(ArgumentAsFloat)[1] == ()
    assert layout(ComplexValue)[1] == ()
    assert layout(ArgumentAsFloats)[1] == ("as_floats",)
    assert layout(ArgumentAsFloatLists)[1] == ("as_float_lists",)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize(
    "make",
    [
        lambda v: schema.load(orjson.dumps({"as_float": NonFinite(v).__wire__}), ArgumentAsFloat),
        lambda v: schema.load(f'{{"as_float": {NonFinite(v).__wire__}}}'.encode(), ArgumentAsFloat),
        lambda v: ArgumentAsFloat(as_float=v),
        lambda v: ArgumentAsFloat.model_validate({"as_float": v}),
        lambda v: ArgumentAsFloat.model_construct(as_float=v),
        lambda v: ArgumentAsFloat(as_float=1.0).model_copy(update={"as_float": v}),
        lambda v: pickle.loads(pickle.dumps(ArgumentAsFloat.model_construct(as_float=v))),
        _assigned,
        lambda v: ComplexValue(real=1.0, imag=v),
        lambda v: NamedArgument(
            name="x",
            arg={"as_float": v},  # type: ignore[arg-type]
            kind=ArgumentKind.POSITIONAL,
        ),
    ],
)
def test_non_finite_floats_are_written_as_torch_strings(
    make: Callable[[float], BaseModel], value: float
) -> None:
    doc = make(value)
    assert "__dataclass_fields__" in vars(ArgumentAsFloat)  # still written natively
    assert schema.dump(doc) == _pydantic(doc)
    assert b"null" not in schema.dump(doc)
    assert NonFinite(value).__wire__.encode() in schema.dump(doc)


def test_an_overflowing_number_reads_as_infinity() -> None:
    doc = schema.load(b'{"as_float": -1e400}', ArgumentAsFloat)
    assert doc.as_float == -math.inf
    assert schema.dump(doc) == b'{"as_float":"-Infinity"}'


def test_finite_floats_stay_plain_floats() -> None:
    doc = schema.load(b'{"as_float": 1e-06}', ArgumentAsFloat)
    assert type(doc.as_float) is float
    assert type(ArgumentAsFloat(as_float=2).as_float) is float
    assert schema.dump(doc) == _pydantic(doc)


def test_a_non_finite_value_reads_back_as_a_float() -> None:
    doc = schema.load(b'{"as_float": "NaN"}', ArgumentAsFloat)
    assert isinstance(doc.as_float, float)
    assert math.isnan(doc.as_float)
    assert repr(doc.as_float) == "nan"
    dumped = doc.model_dump()["as_float"]
    assert type(dumped) is float
    assert math.isnan(dumped)
    assert doc.model_dump(mode="json") == {"as_float": "NaN"}


def test_a_float_list_changed_in_place_is_still_written_exactly() -> None:
    arg = ArgumentAsFloats(as_floats=[1.0])
    arg.as_floats.append(math.nan)
    lists = ArgumentAsFloatLists(as_float_lists=[[0.5]])
    lists.as_float_lists[0].append(-math.inf)
    node = Node(
        target="t",
        inputs=[NamedArgument(name="a", arg=arg), NamedArgument(name="b", arg=lists)],
        outputs=[],
        metadata={},
    )
    assert schema.dump(node) == _pydantic(node)
    assert b'"as_floats":[1.0,"NaN"]' in schema.dump(node)
    assert b'"as_float_lists":[[0.5,"-Infinity"]]' in schema.dump(node)


def test_wrong_types_still_name_the_float_field() -> None:
    for data in (b'{"as_float": "foo"}', b'{"as_float": null}', b'{"as_float": true}'):
        with pytest.raises(schema.DocumentInvalid) as caught:
            schema.load(data, ArgumentAsFloat)
        assert [(i.code, i.path) for i in caught.value.issues] == [("wrong-type", "/as_float")]
