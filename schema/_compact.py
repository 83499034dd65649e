"""Tensor metadata, sizes, strides and devices read as shared entries instead of new models.

A tensor's sizes and strides are lists of SymInt, about a third of a document's objects; as
models through pydantic's tagged union each costs the discriminator's call and a new model.
Here a list whose entries all have the common shapes (``{"as_int": n}`` or an expression with a
scalar hint) is answered from a table of shared entries, which are frozen so that sharing them
is invisible; anything else (wrong types, unknown keys, other shapes) goes through the full
validation, with its errors and extras exactly as before.

A graph's tensor metadata repeats even more: a thousand tensors of a real program have a few
dozen distinct wire forms. `SharedMapValues` answers a whole map of them with one Python call,
keyed by each value's bytes as orjson writes them (exact for JSON-read values, except that a
non-finite float is written as null, which the null check below guards).
"""

from __future__ import annotations

from typing import Any

import orjson
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


class SharedMapValues:
    """The shared instances of a frozen struct that a map holds by name (a graph's tensor
    metadata), keyed by their wire bytes."""

    def __init__(self, cls: type[BaseModel], limit: int = 1 << 12) -> None:
        self.cls = cls
        #: a few thousand entries cover the distinct ones of many documents, in a few MB
        self.limit = limit
        #: wire bytes -> the shared instance and the paths of the nulls in its wire form
        self.table: dict[bytes, tuple[BaseModel, tuple[tuple[Any, ...], ...]]] = {}

    def validate(self, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A wrap validator for ``dict[str, cls]``: shared entries where they fit, the full
        validation for the others (and for the whole map where any of them fails)."""
        if type(value) is not dict:
            return handler(value)
        table = self.table
        out = {}
        for name, item in value.items():
            try:
                entry = table.get(orjson.dumps(item))
            except orjson.JSONEncodeError:  # an int past 64 bits, a lone surrogate
                entry = None
            if entry is None:
                entry = self._keep(item)
            # orjson writes NaN and the infinities as null: the bytes match, the value not
            if entry is not None and (not entry[1] or _all_null(item, entry[1])):
                out[name] = entry[0]
                continue
            try:
                out[name] = handler({name: item})[name]
            except ValidationError:
                return handler(value)  # every error of the map, not only the first
        return out

    def _keep(self, item: Any) -> tuple[BaseModel, tuple[tuple[Any, ...], ...]] | None:
        """A new shared entry read from `item`'s bytes as the document's own would be, or None
        where the full validation must speak (its errors, or extras it may keep)."""
        try:
            key = orjson.dumps(item)
            made = self.cls.model_validate_json(key, extra="forbid")
        except (orjson.JSONEncodeError, ValidationError):
            return None
        if len(self.table) >= self.limit:
            self.table.clear()
        found: list[tuple[Any, ...]] = []
        _nulls(item, (), found)
        return self.table.setdefault(key, (made, tuple(found)))


def _nulls(value: Any, path: tuple[Any, ...], found: list[tuple[Any, ...]]) -> None:
    """The paths of the None values in a JSON-read value."""
    if value is None:
        found.append(path)
    elif type(value) is dict:
        for key, item in value.items():
            _nulls(item, (*path, key), found)
    elif type(value) is list:
        for i, item in enumerate(value):
            _nulls(item, (*path, i), found)


def _all_null(value: Any, paths: tuple[tuple[Any, ...], ...]) -> bool:
    """Whether `value` holds None at each of `paths` (which its wire form has)."""
    for path in paths:
        at = value
        for step in path:
            at = at[step]
        if at is not None:
            return False
    return True


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
