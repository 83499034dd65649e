"""The first-pass validator (schema._fast): it accepts exactly what the models' own validator
accepts, with equal models, and skips the Python discriminator for the common arms."""

from __future__ import annotations

import json
import sys
import typing
from types import FrameType
from typing import Any

import orjson
import pytest
from pydantic import TypeAdapter, ValidationError

import schema
from schema._base import Arm, arm_tag
from schema._fast import common_arm_first, fast_validator
from schema.models import UNIONS, ExportedProgram, GraphSignature, Node
from tests.zoo import PROGRAM_NAMES


def _samples(arm: type[Arm]) -> list[Any]:
    """Payloads for an arm: one that fits it and some that do not."""
    good: dict[str, Any] = {
        "as_none": True,
        "as_tensor": {"name": "x"},
        "as_tensors": [{"name": "x"}],
        "as_int": 3,
        "as_ints": [1, 2],
        "as_float": "NaN",
        "as_floats": [1.5, "-Infinity"],
        "as_string": "s",
        "as_strings": ["s"],
        "as_bool": False,
        "as_bools": [True],
        "as_scalar_type": 7,
        "as_memory_format": 1,
        "as_layout": 7,
        "as_device": {"type": "cpu", "index": None},
        "as_name": "n",
        "as_expr": {"expr_str": "s0", "hint": {"as_int": 4}},
        "as_operator": "aten.add.Tensor",
        "as_complex": {"real": 1.0, "imag": "Infinity"},
        "as_int_lists": [[1], []],
        "as_float_lists": [[1.0]],
        "as_nested_tensors": [[{"name": "x"}]],
    }
    tag = arm.__tag__
    fits = good.get(tag)
    return [fits, "wrong", None, [], {"name": 5}, 2**70] if fits is not None else ["wrong"]


def _union_inputs() -> list[tuple[str, Any]]:
    cases: list[tuple[str, Any]] = []
    for name, union in UNIONS.items():
        arms = typing.get_args(typing.get_args(union)[0])
        for arm in arms:
            cases.extend((name, {arm.__tag__: payload}) for payload in _samples(arm))
        tags = [arm.__tag__ for arm in arms]
        cases += [
            (name, {}),
            (name, {tags[0]: None, tags[1]: None}),
            (name, {"as_unknown": 1}),
            (name, []),
            (name, "as_int"),
            (name, None),
        ]
    return cases


def _validators(union: Any) -> tuple[Any, Any]:
    adapter: TypeAdapter[Any] = TypeAdapter(list[union])
    return adapter.validator, common_arm_first(adapter.core_schema)


def _outcome(validator: Any, data: bytes) -> Any:
    try:
        made = validator.validate_json(data, extra="forbid")
    except ValidationError:
        return "refused"
    # by wire bytes and field types: NaN is not equal to itself
    return [(type(m), schema.dump(m), [type(v) for v in m.__dict__.values()]) for m in made]


@pytest.mark.parametrize(("union", "value"), _union_inputs())
def test_same_outcome_as_the_tagged_union(union: str, value: Any) -> None:
    own, fast = _validators(UNIONS[union])
    # json writes ints past 64 bits, which orjson refuses
    data = json.dumps([value]).encode()
    assert _outcome(fast, data) == _outcome(own, data)


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_zoo_documents_read_alike(name: str, zoo_json: dict[str, bytes]) -> None:
    own = ExportedProgram.__pydantic_validator__.validate_json(zoo_json[name], extra="forbid")
    fast = fast_validator(ExportedProgram).validate_json(zoo_json[name], extra="forbid")
    assert fast == own
    assert schema.dump(fast) == schema.dump(own)


def test_refused_documents_keep_their_errors() -> None:
    node = {
        "target": "aten.add.Tensor",
        "inputs": [{"name": "self", "arg": {"as_tensor": {"name": 5}}}],
        "outputs": [{"as_tensor": {"name": "y"}, "as_int": 1}],
        "metadata": {},
    }
    with pytest.raises(schema.DocumentInvalid) as caught:
        schema.read(orjson.dumps(node), Node)
    assert [(i.code, i.path) for i in caught.value.issues] == [
        ("wrong-type", "/inputs/0/arg/as_tensor/name"),
        ("union-many-arms", "/outputs/0"),
    ]


def test_common_arms_skip_the_discriminator() -> None:
    calls: list[str] = []

    def watch(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is arm_tag.__code__:
            calls.append(event)

    fast = fast_validator(GraphSignature)
    common = {
        "input_specs": [
            {"parameter": {"arg": {"name": "p"}, "parameter_name": "w"}},
            {"user_input": {"arg": {"as_tensor": {"name": "x"}}}},
        ],
        "output_specs": [],
    }
    sys.setprofile(watch)
    try:
        fast.validate_json(orjson.dumps(common), extra="forbid")
        seen = len(calls)
        common["output_specs"] = [{"user_output": {"arg": {"as_int": 1}}}]
        fast.validate_json(orjson.dumps(common), extra="forbid")
    finally:
        sys.setprofile(None)
    # user_input; then user_input again, user_output and as_int: the discriminator's arms
    assert (seen, len(calls)) == (1, 4)
