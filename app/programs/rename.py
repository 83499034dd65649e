"""Renaming the values arguments reference, as torch's canonical form does (``replace_use`` and
``rename_def`` in torch/_export/serde/serialize.py), copying only the models that change.

The copies share every unchanged sub-model with the original, which is never mutated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from schema.models import (
    ArgumentAsCustomObj,
    ArgumentAsNestedTensors,
    ArgumentAsOptionalTensor,
    ArgumentAsOptionalTensors,
    ArgumentAsSymBool,
    ArgumentAsSymBools,
    ArgumentAsSymFloat,
    ArgumentAsSymFloats,
    ArgumentAsSymInt,
    ArgumentAsSymInts,
    ArgumentAsTensor,
    ArgumentAsTensors,
    OptionalTensorArgumentAsTensor,
    SymBoolArgumentAsName,
    SymFloatArgumentAsName,
    SymIntArgumentAsName,
)

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


def _named_all(models: list[M], field: str, table: dict[str, str]) -> list[M]:
    new = [_named(m, field, table) for m in models]
    return models if all(n is o for n, o in zip(new, models, strict=True)) else new


_SYM_NAMES = (SymIntArgumentAsName, SymFloatArgumentAsName, SymBoolArgumentAsName)


def _sym(a: Any, table: dict[str, str]) -> Any:
    return _named(a, "as_name", table) if type(a) in _SYM_NAMES else a


def _syms(items: list[Any], table: dict[str, str]) -> list[Any]:
    new = [_sym(a, table) for a in items]
    return items if all(n is o for n, o in zip(new, items, strict=True)) else new


def _renamed_optional(a: Any, table: dict[str, str]) -> Any:
    if type(a) is OptionalTensorArgumentAsTensor:
        return _arm(a, _named(a.as_tensor, "name", table))
    return a


def _arm(arm: M, value: Any) -> M:
    """The same union arm holding `value`; the arm itself when `value` is its own payload."""
    tag: str = getattr(arm, "__tag__")  # noqa: B009 - a ClassVar of every Arm
    if value is getattr(arm, tag):
        return arm
    return new_arm(type(arm), tag, value)


def _optionals(a: Any, table: dict[str, str]) -> Any:
    old = a.as_optional_tensors
    new = [_renamed_optional(o, table) for o in old]
    return a if all(n is o for n, o in zip(new, old, strict=True)) else _arm(a, new)


def _nested(a: Any, table: dict[str, str]) -> Any:
    old = a.as_nested_tensors
    new = [_named_all(row, "name", table) for row in old]
    return a if all(n is o for n, o in zip(new, old, strict=True)) else _arm(a, new)


#: How torch's ``replace_use`` / ``rename_def`` rewrite each Argument arm; other arms are kept.
_RENAMERS: dict[type[BaseModel], Callable[[Any, dict[str, str]], Any]] = {
    ArgumentAsTensor: lambda a, t: _arm(a, _named(a.as_tensor, "name", t)),
    ArgumentAsTensors: lambda a, t: _arm(a, _named_all(a.as_tensors, "name", t)),
    ArgumentAsSymInt: lambda a, t: _arm(a, _sym(a.as_sym_int, t)),
    ArgumentAsSymInts: lambda a, t: _arm(a, _syms(a.as_sym_ints, t)),
    ArgumentAsSymFloat: lambda a, t: _arm(a, _sym(a.as_sym_float, t)),
    ArgumentAsSymFloats: lambda a, t: _arm(a, _syms(a.as_sym_floats, t)),
    ArgumentAsSymBool: lambda a, t: _arm(a, _sym(a.as_sym_bool, t)),
    ArgumentAsSymBools: lambda a, t: _arm(a, _syms(a.as_sym_bools, t)),
    ArgumentAsOptionalTensors: _optionals,
    ArgumentAsOptionalTensor: lambda a, t: _arm(a, _renamed_optional(a.as_optional_tensor, t)),
    ArgumentAsCustomObj: lambda a, t: _arm(a, _named(a.as_custom_obj, "name", t)),
    ArgumentAsNestedTensors: _nested,
}


def renamed(arg: Any, table: dict[str, str]) -> Any:
    """The argument with the values in `table` renamed (itself when none is)."""
    rename = _RENAMERS.get(type(arg))
    return arg if rename is None else rename(arg, table)
