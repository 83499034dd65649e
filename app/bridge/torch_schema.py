"""Our validated models -> torch's schema dataclasses, directly (imported only where torch runs).

torch's own route (`_bytes_to_dataclass`) re-parses JSON and walks it with `typing.get_type_hints`
per struct; our documents are already validated, so each model class maps once to a builder.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable
from enum import IntEnum
from typing import Any

from pydantic import BaseModel
from torch._export.serde import schema as torch_schema
from torch._export.serde.union import _UnionTag

import schema
from schema import Arm, Struct
from schema.models import ENUMS, STRUCTS, UNIONS

Builder = Callable[[Any], Any]

_PRIMITIVES = (int, float, str, bool, type(None))


def to_torch(doc: schema.ExportedProgram) -> torch_schema.ExportedProgram:
    """torch's `ExportedProgram` dataclass holding the same values as `doc`."""
    result: torch_schema.ExportedProgram = _builders().convert(doc)
    return result


class _Builders:
    """Per-class builders, found once from the two schemas' class names."""

    def __init__(self) -> None:
        self.by_class: dict[type, Builder] = {}
        for name, model in STRUCTS.items():
            target = getattr(torch_schema, name, None)
            if dataclasses.is_dataclass(target):
                self.by_class[model] = self._struct(model, target)
        for name, alias in UNIONS.items():
            target = getattr(torch_schema, name)
            union = typing.get_args(alias)[0]
            for arm in typing.get_args(union):
                self.by_class[arm] = self._arm(arm, target)
        for enum in ENUMS:
            self.by_class[enum] = self._enum(enum, getattr(torch_schema, enum.__name__))
        # our models hold a NaN or an infinity as a float subclass, which torch refuses
        self.by_class[schema.NonFinite] = float

    def convert(self, value: Any) -> Any:
        """torch's counterpart of any value of our models."""
        kind = type(value)
        builder = self.by_class.get(kind)
        if builder is not None:
            return builder(value)
        if kind is list:
            if value and type(value[0]) is float:
                # a list of floats may hold such a subclass further on
                return [float(v) for v in value]
            if not value or type(value[0]) in _PRIMITIVES:
                return list(value)
            return [self.convert(v) for v in value]
        if kind is dict:
            if not value or type(next(iter(value.values()))) in _PRIMITIVES:
                return dict(value)
            return {k: self.convert(v) for k, v in value.items()}
        if isinstance(value, _PRIMITIVES):
            return value
        raise TypeError(f"no torch schema counterpart for {kind.__name__}")

    def _struct(self, model: type[BaseModel], target: Any) -> Builder:
        ours = set(model.model_fields)
        shared = [f.name for f in dataclasses.fields(target) if f.name in ours]
        defaults: dict[str, Callable[[], Any]] = {}
        for f in dataclasses.fields(target):
            if f.name in ours:
                continue
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = functools.partial(lambda v: v, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f.default_factory
            else:
                raise TypeError(f"torch's {target.__name__}.{f.name} has no counterpart")
        convert = self.convert

        def build(value: Struct) -> Any:
            # The dataclasses are plain (no slots, no __post_init__): filling __dict__ skips
            # __init__'s per-field overhead and builds the same object.
            obj = object.__new__(target)
            fields = obj.__dict__
            for name in shared:
                fields[name] = convert(getattr(value, name))
            for name, make in defaults.items():
                fields[name] = make()
            return obj

        return build

    def _arm(self, arm: type[Arm], target: Any) -> Builder:
        tag_name = arm.__tag__
        empty = {f.name: None for f in dataclasses.fields(target)}
        tag = _UnionTag.create(tag_name, target)  # type: ignore[no-untyped-call]
        convert = self.convert

        def build(value: Arm) -> Any:
            obj = object.__new__(target)
            fields = obj.__dict__
            fields.update(empty)
            fields[tag_name] = convert(getattr(value, tag_name))
            fields["_type"] = tag
            return obj

        return build

    def _enum(self, enum: type[IntEnum], target: Any) -> Builder:
        members = {member: target(member.value) for member in enum}
        return members.__getitem__


@functools.cache
def _builders() -> _Builders:
    return _Builders()
