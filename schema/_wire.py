"""How models become wire bytes through orjson: which classes it may write natively, and the
callback for the others.

orjson writes an instance of a class whose own namespace has `__dataclass_fields__` from its
`__dict__` in Rust (skipping `_`-prefixed keys, which no wire field has); a Python callback costs
about a microsecond per object. That is exact while `__dict__` is the wire form: no extras
(which live beside it) and every field present. Classes are marked at import (`write_natively`);
every entry point that can make a model break that (see `schema._base._Model`) hands it to
`keep_exact`, which unmarks its class for good.

Floats: orjson writes finite floats as pydantic does, but NaN and the infinities as null. A float
field therefore never holds a plain non-finite float: validation makes it a `NonFinite`, which
orjson (to which a float subclass is no float) hands to the callback, and `keep_exact_one` turns
one put there by construction or assignment into a `NonFinite` too. A list of floats can be
changed in place, so only classes with such a list are left to the callback, which rewrites it.

A document shares each of its few distinct tensor metas between its many tensors; orjson would
write every place anew, so within one dump a meta is written once and its bytes reused as an
`orjson.Fragment` (`write_as_fragment`, `fragments`).
"""

from __future__ import annotations

import math
import operator
import threading
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

#: The instance-dict descriptor of every model: read through `__wire__` on a marked class, it
#: gives orjson's callback (an attrgetter, in C) the model's `__dict__` without a Python frame.
_DICT = BaseModel.__dict__["__dict__"]

CONTAINERS = frozenset((dict, list, tuple))

M = TypeVar("M")


def write_natively(cls: type[BaseModel]) -> None:
    """Let orjson write instances of `cls` from their `__dict__`, without a Python callback."""
    cls.__dataclass_fields__ = {}  # type: ignore[attr-defined]
    cls.__wire__ = _DICT  # type: ignore[attr-defined]


def keep_exact(value: Any) -> None:
    """Unmark the classes (see `write_natively`) of the models in `value` that carry extras
    or lack a field, so that `schema.dump` writes them through its checking callback."""
    if isinstance(value, BaseModel):
        keep_exact_one(value)
        for item in value.__dict__.values():
            keep_exact(item)
    elif isinstance(value, list):
        for item in value:
            keep_exact(item)
    elif isinstance(value, dict):
        for item in value.values():
            keep_exact(item)


def keep_exact_one(model: BaseModel) -> None:
    """Unmark the class of `model` if it carries extras or lacks a field; make a plain NaN or
    infinity in a float field a `NonFinite`."""
    cls = type(model)
    fields = model.__dict__
    if model.__pydantic_extra__ or len(fields) != len(cls.__pydantic_fields__):
        unmark(cls)
    try:
        floats = _SCALAR_FLOATS[cls]
    except KeyError:
        floats = _SCALAR_FLOATS.setdefault(cls, _float_fields(cls, inside=False))
    for name in floats:
        value = fields.get(name)
        if type(value) is float and not math.isfinite(value):
            fields[name] = NonFinite(value)


def unmark(cls: type[BaseModel]) -> None:
    """Have orjson write instances of `cls` through the checking callback from now on."""
    if "__dataclass_fields__" in vars(cls):
        delattr(cls, "__dataclass_fields__")
        delattr(cls, "__wire__")


def noted(made: M, options: dict[str, Any]) -> M:
    """A validation's result; unless it refused extras, each of its models is looked at."""
    if options.get("extra") != "forbid":
        keep_exact(made)
    return made


def keep_exact_made(given: Any, made: Any) -> None:
    """`keep_exact` on the models validation made from `given` (the models it was handed
    as they are were looked at when they were made)."""
    if isinstance(given, BaseModel):
        return
    if isinstance(given, list | tuple) and isinstance(made, list | tuple):
        for g, m in zip(given, made, strict=False):
            keep_exact_made(g, m)
    elif isinstance(given, dict) and isinstance(made, dict):
        for key, g in given.items():
            keep_exact_made(g, made.get(key))
    else:
        keep_exact(made)


#: orjson's callback: a model's `__wire__`; anything else raises (and pydantic writes it).
wire_of = operator.attrgetter("__wire__")


class _Calls(threading.local):
    """Per thread: the running dump's orjson option and the fragments written in it, by the
    id of their model (held too, so that no other object takes its id during the call)."""

    def __init__(self) -> None:
        self.memo: tuple[int, dict[int, tuple[BaseModel, orjson.Fragment]]] | None = None


_CALLS = _Calls()


@contextmanager
def fragments(option: int) -> Iterator[None]:
    """Within the block, a model written as a fragment (see `write_as_fragment`) is written
    once per orjson `option` and reused. Nothing can change a model while orjson writes the
    document, but a list it holds can change between dumps: the memo ends with the block."""
    previous = _CALLS.memo
    _CALLS.memo = (option, {})
    try:
        yield
    finally:
        _CALLS.memo = previous


def write_as_fragment(cls: type[BaseModel]) -> None:
    """Have orjson write each instance of `cls` (a frozen class whose instances are shared)
    once per `fragments` block, and reuse those bytes for its other places."""
    unmark(cls)
    cls.__wire__ = property(_fragment_of)  # type: ignore[attr-defined]


def _fragment_of(value: BaseModel) -> Any:
    memo = _CALLS.memo
    if memo is None:
        return fields_of(value)
    option, made = memo
    known = made.get(id(value))
    if known is not None:
        return known[1]
    written = orjson.Fragment(orjson.dumps(fields_of(value), default=wire_of, option=option))
    made[id(value)] = (value, written)
    return written


class NonFinite(float):
    """NaN or an infinity held by a float field: written as torch's string (see the module)."""

    __slots__ = ()

    @property
    def __wire__(self) -> str:
        """torch's string for the value, which orjson's callback writes."""
        return "NaN" if self != self else "Infinity" if self > 0 else "-Infinity"


def nonfinite(value: float) -> float:
    """A validated non-finite float as the `NonFinite` a float field holds."""
    return NonFinite(value)


class _Unsure(TypeError):
    """Raised inside orjson's callback to hand the document to pydantic's serializer."""


#: Per model class: its field count and the fields that can hold a list of floats.
_LAYOUTS: dict[type, tuple[int, tuple[str, ...]]] = {}
#: Per model class: the fields that hold a float (not in a list).
_SCALAR_FLOATS: dict[type, tuple[str, ...]] = {}


def fields_of(value: BaseModel) -> dict[str, Any]:
    """A model's wire fields (`__wire__` of a class orjson does not write natively), with
    non-finite floats in lists as torch's strings; raises where only pydantic can write it."""
    try:
        count, floats = _LAYOUTS[type(value)]
    except KeyError:
        count, floats = _LAYOUTS.setdefault(type(value), layout(type(value)))
    fields: dict[str, Any] = value.__dict__
    if value.__pydantic_extra__ or len(fields) != count:
        raise _Unsure
    if floats:
        # orjson writes NaN and the infinities as null, and a list may have been given one
        fields = dict(fields)
        for name in floats:
            fields[name] = _wire_floats(fields[name])
    return fields


def layout(cls: type[BaseModel]) -> tuple[int, tuple[str, ...]]:
    """A model class's field count and the fields that can hold a list of floats (which
    only the callback writes exactly)."""
    return len(cls.model_fields), _float_fields(cls, inside=True)


def _float_fields(cls: type[BaseModel], *, inside: bool) -> tuple[str, ...]:
    """The fields of `cls` that hold floats in a list (`inside`) or as their value."""
    return tuple(
        name
        for name, info in cls.model_fields.items()
        if inside in _float_places(info.annotation, inside=False)
    )


def _float_places(annotation: Any, *, inside: bool) -> set[bool]:
    """Where values of `annotation` can hold a float: in a container (True), or as the value
    itself (False)."""
    if annotation is float:
        return {inside}
    inside = inside or typing.get_origin(annotation) in CONTAINERS
    places: set[bool] = set()
    for arg in typing.get_args(annotation):
        places |= _float_places(arg, inside=inside)
    return places


def _wire_floats(value: Any) -> Any:
    if type(value) is float:
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if type(value) is list:
        return [_wire_floats(item) for item in value]
    return value
