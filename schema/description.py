"""Descriptions: a schema version written as data, in the shape of torch's schema.yaml."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated, Any, Union

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from schema._base import Arm, OneOf, Struct, Version, Wire, WireName
from schema.errors import DescriptionInvalid
from schema.history import TREESPEC_VERSION, describable, format_version
from schema.models import ENUMS, STRUCTS, UNIONS

Description = dict[str, Any]
_SCALARS = {int: "int", str: "str", bool: "bool", float: "float"}


def render_type(annotation: Any) -> str:
    """The torch spelling of a field's annotation: ``Optional[List[SymInt]]`` and the like."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        for meta in annotation.__metadata__:
            if isinstance(meta, OneOf | WireName):
                return meta.name
        return render_type(args[0])
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return f"Optional[{render_type(rest[0])}]"
        raise DescriptionInvalid(f"a union that is not Optional cannot be described: {annotation}")
    if origin is list:
        return f"List[{render_type(args[0])}]"
    if origin is dict:
        return f"Dict[{render_type(args[0])}, {render_type(args[1])}]"
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if isinstance(annotation, type) and issubclass(annotation, Struct | IntEnum):
        return annotation.__name__
    raise DescriptionInvalid(f"cannot describe the annotation {annotation!r}")


def field_annotation(info: FieldInfo) -> Any:
    """The field's full annotation, with the metadata pydantic moved aside put back."""
    if not info.metadata:
        return info.annotation
    return Annotated[(info.annotation, *info.metadata)]


def field_wire(info: FieldInfo) -> Wire:
    """The Wire metadata (field id and life span) of a field."""
    for meta in info.metadata:
        if isinstance(meta, Wire):
            return meta
    raise DescriptionInvalid(f"field without Wire metadata: {info}")


def render_default(info: FieldInfo) -> str | None:
    """torch's spelling of a default (``None``, ``'[]'``, ``'{}'``, ``False``, ``<=2.4``)."""
    if info.default_factory is not None:
        return repr(info.default_factory())  # type: ignore[call-arg]
    if info.default is PydanticUndefined:
        return None
    if isinstance(info.default, str):
        return info.default
    return repr(info.default)


def union_arms(union: Any) -> tuple[OneOf, list[type[Arm]]]:
    """The OneOf marker of a union alias and its arm models in declaration order."""
    inner, *metadata = typing.get_args(union)
    marker = next(m for m in metadata if isinstance(m, OneOf))
    return marker, list(typing.get_args(inner))


@dataclass(frozen=True)
class FieldDescription:
    """One field as the history records it, across every version."""

    name: str
    id: int
    type: str
    default: str | None
    since: Version
    until: Version | None


def struct_fields(model: type[Struct]) -> list[FieldDescription]:
    """The fields of a struct in declaration order, with their history."""
    out = []
    for name, info in model.model_fields.items():
        wire = field_wire(info)
        out.append(
            FieldDescription(
                name,
                wire.id,
                render_type(field_annotation(info)),
                render_default(info),
                wire.since,
                wire.until,
            )
        )
    return out


def arm_fields(union: Any) -> list[FieldDescription]:
    """The arms of a union in declaration order, with their history."""
    _, arms = union_arms(union)
    out = []
    for arm in arms:
        [(name, info)] = arm.model_fields.items()
        wire = field_wire(info)
        out.append(
            FieldDescription(
                name, wire.id, render_type(field_annotation(info)), None, wire.since, wire.until
            )
        )
    return out


def _alive(since: Version, until: Version | None, version: Version) -> bool:
    return since <= version and (until is None or version < until)


def _fields(fields: list[FieldDescription], version: Version) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        if _alive(f.since, f.until, version):
            out[f.name] = (
                {"type": f.type}
                if f.default is None
                else {
                    "type": f.type,
                    "default": f.default,
                }
            )
    return out


def describe(version: str | Version) -> Description:
    """The description of a known 8.x version, equal to torch's schema.yaml of that version."""
    v = describable(version)
    types_: dict[str, Any] = {}
    for name, model in STRUCTS.items():
        if _alive(model.__since__, model.__until__, v):
            types_[name] = {"kind": "struct", "fields": _fields(struct_fields(model), v)}
    for name, union in UNIONS.items():
        marker, _ = union_arms(union)
        if _alive(marker.since, marker.until, v):
            types_[name] = {"kind": "union", "fields": _fields(arm_fields(union), v)}
    for enum, (since, value_since) in ENUMS.items():
        if _alive(since, None, v):
            values = {m.name: m.value for m in enum if value_since.get(m, since) <= v}
            types_[enum.__name__] = {"kind": "enum", "fields": values}
    out: Description = {name: types_[name] for name in sorted(types_)}
    out["SCHEMA_VERSION"] = list(v)
    out["TREESPEC_VERSION"] = TREESPEC_VERSION
    return out


def description_version(description: Description) -> str:
    """The ``major.minor`` a description declares."""
    raw = description.get("SCHEMA_VERSION")
    if not (isinstance(raw, list) and len(raw) == 2 and all(isinstance(x, int) for x in raw)):
        raise DescriptionInvalid("SCHEMA_VERSION must be a list [major, minor]")
    return format_version((raw[0], raw[1]))


# ---------------------------------------------------------------- type expressions


@dataclass(frozen=True)
class TypeExpr:
    """A parsed torch type string: a name with type arguments (``List``, ``Dict``, ...)."""

    name: str
    args: tuple[TypeExpr, ...] = ()

    def __str__(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name}[{', '.join(str(a) for a in self.args)}]"


def parse_type(text: str) -> TypeExpr:
    """Parse ``Dict[str, List[Argument]]`` into a TypeExpr; refuse malformed strings."""
    expr, rest = _parse(text.replace(" ", ""), 0)
    if rest != len(text.replace(" ", "")):
        raise DescriptionInvalid(f"malformed type {text!r}")
    return expr


def _parse(text: str, i: int) -> tuple[TypeExpr, int]:
    j = i
    while j < len(text) and (text[j].isalnum() or text[j] in "_()"):
        j += 1
    name = text[i:j]
    if not name:
        raise DescriptionInvalid(f"malformed type {text!r} at {i}")
    if j < len(text) and text[j] == "[":
        args = []
        j += 1
        while True:
            arg, j = _parse(text, j)
            args.append(arg)
            if j < len(text) and text[j] == ",":
                j += 1
                continue
            if j < len(text) and text[j] == "]":
                return TypeExpr(name, tuple(args)), j + 1
            raise DescriptionInvalid(f"malformed type {text!r} at {j}")
    return TypeExpr(name), j
