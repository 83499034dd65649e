"""Tensor sizes, strides and devices read as shared entries instead of one new model each.

A tensor's sizes and strides are lists of SymInt, about a third of a document's objects; as
models through pydantic's tagged union each costs the discriminator's call and a new model.
Here a list whose entries all have the common shapes (``{"as_int": n}`` or an expression with a
scalar hint) is answered from a table of shared entries, which are frozen so that sharing them
is invisible; anything else (wrong types, unknown keys, other shapes) goes through the full
validation, with its errors and extras exactly as before.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError, ValidatorFunctionWrapHandler

#: Past this many shared entries the table starts again (documents rarely need a few hundred).
_LIMIT = 1 << 16
_SCALARS = frozenset((int, bool, float, str))


class SharedSymInts:
    """The shared SymInt entries, keyed by their wire form."""

    def __init__(self, as_int: type[BaseModel], as_expr: type[BaseModel]) -> None:
        self.as_int = as_int
        self.as_expr = as_expr
        self.ints: dict[int, BaseModel] = {}
        self.exprs: dict[tuple[Any, ...], BaseModel] = {}

    def validate(self, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A wrap validator for ``list[SymInt]``: shared entries, or the full validation."""
        if type(value) is not list:
            return handler(value)
        out = []
        for item in value:
            made = self._entry(item) if type(item) is dict and len(item) == 1 else None
            if made is None:
                return handler(value)
            out.append(made)
        return out

    def validate_one(self, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A wrap validator for one SymInt: a shared entry, or the full validation."""
        made = self._entry(value) if type(value) is dict and len(value) == 1 else None
        return handler(value) if made is None else made

    def _entry(self, item: dict[str, Any]) -> Any:
        n = item.get("as_int")
        if type(n) is int:
            made = self.ints.get(n)
            if made is None:
                made = _keep(self.ints, n, self.as_int, item)
            return made
        expr = item.get("as_expr")
        key = _expr_key(expr) if type(expr) is dict else None
        if key is None:
            return None
        made = self.exprs.get(key)
        if made is None:
            made = _keep(self.exprs, key, self.as_expr, item)
        return made


class SharedScalarStructs:
    """The shared instances of a struct whose fields are all scalars (a Device), keyed by
    their wire form."""

    def __init__(self, cls: type[BaseModel]) -> None:
        self.cls = cls
        self.table: dict[tuple[Any, ...], BaseModel] = {}

    def validate(self, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A wrap validator for the struct: a shared instance, or the full validation."""
        key = _scalars_key(value) if type(value) is dict else None
        made = None if key is None else self.table.get(key)
        if made is None and key is not None:
            made = _keep(self.table, key, self.cls, value)
        return handler(value) if made is None else made


def _keep(table: dict[Any, BaseModel], key: Any, cls: type[BaseModel], item: Any) -> Any:
    """A new shared entry validated from `item`, or None where the full validation must
    speak (its errors, or extras it may keep)."""
    try:
        made = cls.model_validate(item, extra="forbid")
    except ValidationError:
        return None
    if len(table) >= _LIMIT:
        table.clear()
    return table.setdefault(key, made)


def _scalars_key(item: dict[str, Any]) -> tuple[Any, ...] | None:
    """The table key of an object whose values are all scalars or null, else None (the
    types are part of it: 1, 1.0 and true are written differently)."""
    key = []
    for name, value in item.items():
        if value is not None and type(value) not in _SCALARS:
            return None
        key.append((name, type(value), value))
    return tuple(key)


def _expr_key(expr: dict[str, Any]) -> tuple[Any, ...] | None:
    """The table key of an ``as_expr`` payload of the common shape, else None."""
    text = expr.get("expr_str")
    if type(text) is not str or not 1 <= len(expr) <= 2:
        return None
    if len(expr) == 1:
        return (text,)
    hint = expr.get("hint", ...)
    if hint is None:
        return (text, None)
    if type(hint) is not dict or len(hint) != 1:
        return None
    ((kind, value),) = hint.items()
    if type(value) not in _SCALARS:
        return None
    return (text, kind, type(value), value)
