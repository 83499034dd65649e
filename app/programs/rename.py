"""Renaming the values arguments reference, as torch's canonical form does (``replace_use`` and
``rename_def`` in torch/_export/serde/serialize.py), copying only the models that change.

The copies share every unchanged sub-model with the original, which is never mutated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from schema.models import ARGUMENT_ARMS, ValueSlots

M = TypeVar("M", bound=BaseModel)

_set = object.__setattr__


def copy_model(model: M, update: dict[str, Any]) -> M:
    """``model.model_copy(update=...)`` for declared fields, minus its generic overhead.

    Canonicalizing allocates one model per renamed reference, so this is the hot path; it sets
    the same four slots pydantic's ``__copy__`` does (our models have no private attributes).
    """
    cls = type(model)
    new = cls.__new__(cls)
    values = model.__dict__.copy()
    values.update(update)
    _set(new, "__dict__", values)
    extra = model.__pydantic_extra__
    _set(new, "__pydantic_extra__", None if extra is None else extra.copy())
    _set(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    _set(new, "__pydantic_private__", None)
    return new


def with_field(model: M, field: str, value: Any) -> M:
    """A shallow copy of `model` with one field replaced (extras and the rest shared)."""
    return copy_model(model, {field: value})


def new_arm(cls: type[M], tag: str, value: Any) -> M:
    """``cls.model_construct(**{tag: value})`` for a union arm, minus its generic overhead."""
    new = cls.__new__(cls)
    _set(new, "__dict__", {tag: value})
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_fields_set__", {tag})
    _set(new, "__pydantic_private__", None)
    return new


def _named(model: M, field: str, table: dict[str, str]) -> M:
    old = getattr(model, field)
    new = table.get(old, old)
    return model if new == old else with_field(model, field, new)


def _arm(arm: M, value: Any) -> M:
    """The same union arm holding `value`; the arm itself when `value` is its own payload."""
    tag: str = getattr(arm, "__tag__")  # noqa: B009 - a ClassVar of every Arm
    if value is getattr(arm, tag):
        return arm
    return new_arm(type(arm), tag, value)


#: Renames the values a model names: (model, old name -> new name) -> a copy, or the model itself.
Renamer = Callable[[Any, dict[str, str]], Any]


def _slot_renamer(slots: ValueSlots) -> Renamer:
    """How one slot is renamed (a literal arm of a slot union is kept)."""
    arm, path = slots.named_by, slots.name_path
    if arm is None:
        return lambda item, t: _named(item, "name", t)
    field = path[0]
    if len(path) == 1:
        return lambda item, t: _named(item, field, t) if type(item) is arm else item
    return lambda item, t: (
        _arm(item, _named(getattr(item, field), "name", t)) if type(item) is arm else item
    )


def _all(items: list[Any], slot: Renamer, table: dict[str, str]) -> list[Any]:
    new = [slot(item, table) for item in items]
    return items if all(n is o for n, o in zip(new, items, strict=True)) else new


def _arm_renamer(arm: type[BaseModel], slots: ValueSlots) -> Renamer:
    tag: str = getattr(arm, "__tag__")  # noqa: B009 - a ClassVar of every Arm
    slot = _slot_renamer(slots)
    if slots.depth == 0:
        return lambda a, t: _arm(a, slot(getattr(a, tag), t))
    if slots.depth == 1:
        return lambda a, t: _arm(a, _all(getattr(a, tag), slot, t))

    def rows(a: Any, t: dict[str, str]) -> Any:
        old = getattr(a, tag)
        new = [_all(row, slot, t) for row in old]
        return a if all(n is o for n, o in zip(new, old, strict=True)) else _arm(a, new)

    return rows


#: How torch's ``replace_use`` / ``rename_def`` rewrite each Argument arm; other arms are kept.
_RENAMERS: dict[type[BaseModel], Renamer] = {
    arm: _arm_renamer(arm, slots) for arm, slots in ARGUMENT_ARMS.items() if slots is not None
}


def renamed(arg: Any, table: dict[str, str]) -> Any:
    """The argument with the values in `table` renamed (itself when none is)."""
    rename = _RENAMERS.get(type(arg))
    return arg if rename is None else rename(arg, table)
