"""`schema.ARGUMENT_ARMS` covers every Argument arm and says truly where each names values."""

from __future__ import annotations

import typing
from typing import Any

import pytest

import schema
from schema import ARGUMENT_ARMS, Arm, ValueSlots

#: The models whose instances name a graph value.
_NAMING = {
    schema.TensorArgument,
    schema.CustomObjArgument,
    schema.SymIntArgumentAsName,
    schema.SymFloatArgumentAsName,
    schema.SymBoolArgumentAsName,
    schema.OptionalTensorArgumentAsTensor,
}


def _argument_arms() -> set[type[Any]]:
    union, *_ = typing.get_args(schema.Argument)
    return set(typing.get_args(union))


def _payload(arm: type[Arm]) -> Any:
    return arm.model_fields[arm.__tag__].annotation


def _depth(annotation: Any) -> tuple[int, Any]:
    """How many lists wrap the slot type, and the slot type."""
    depth = 0
    while typing.get_origin(annotation) is list:
        (annotation,) = typing.get_args(annotation)
        depth += 1
    return depth, annotation


def _types(annotation: Any) -> set[Any]:
    """The slot type and every type a union or `Annotated` of it holds."""
    found = {annotation}
    for arg in typing.get_args(annotation):
        found |= _types(arg)
    return found


def test_every_argument_arm_is_in_the_table() -> None:
    assert set(ARGUMENT_ARMS) == _argument_arms()


@pytest.mark.parametrize(
    ("arm", "slots"),
    [(a, s) for a, s in ARGUMENT_ARMS.items() if a is not schema.ArgumentAsStringToArgument],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_slots_fit_the_arm(arm: type[Arm], slots: ValueSlots | None) -> None:
    depth, slot = _depth(_payload(arm))
    names = _types(slot) & _NAMING
    if slots is None:
        assert names == set()
        return
    assert slots.depth == depth
    assert names == {slots.named_by or slot}


def test_name_paths() -> None:
    assert ValueSlots("tensor", 0).name_path == ("name",)
    sym = ValueSlots("sym_int", 0, schema.SymIntArgumentAsName)
    assert sym.name_path == ("as_name",)
    optional = ValueSlots("tensor", 0, schema.OptionalTensorArgumentAsTensor)
    assert optional.name_path == ("as_tensor", "name")
