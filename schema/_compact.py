"""Tensor sizes and strides read in one Python step per list instead of one model per entry.

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

    def _entry(self, item: dict[str, Any]) -> Any:
        n = item.get("as_int")
        if type(n) is int:
            made = self.ints.get(n)
            if made is None:
                made = self._keep(self.ints, n, item)
            return made
        expr = item.get("as_expr")
        key = _expr_key(expr) if type(expr) is dict else None
        if key is None:
            return None
        made = self.exprs.get(key)
        if made is None:
            made = self._keep(self.exprs, key, item)
        return made

    def _keep(self, table: dict[Any, BaseModel], key: Any, item: dict[str, Any]) -> Any:
        cls = self.as_int if "as_int" in item else self.as_expr
        try:
            made = cls.model_validate(item, extra="forbid")
        except ValidationError:
            return None
        if len(table) >= _LIMIT:
            table.clear()
        return table.setdefault(key, made)


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
