"""Documents for an older 8.x reader: the keys it does not know dropped where that loses nothing.

A field added after the target version is dropped where it holds its default (torch adds a
field with the default that means "as before"); a strict reader (torch 2.6-2.8 builds its
dataclasses with ``cls(**data)``) fails on any key it does not know, and one that skips them
would read the same, so every such key goes. What the target cannot say is refused, each with
its rule and the JSON pointer of its first occurrence: a field it lacks that holds a value
(``field-not-in-version``), a union arm or enum value it lacks (``arm-not-in-version``,
``enum-value-not-in-version``: fatal to every reader), a key our schema does not declare
(``unknown-field``: its meaning is unknown), and a schema change between the target and the
current version that has no exact downgrade (``schema-change-unsupported``; none in 8.2-8.20).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel

from schema._base import Version
from schema._tree import places
from schema.compat import Use, struct_defaults, used_features
from schema.description import Description, TypeExpr, describe, parse_type
from schema.diff import diff
from schema.errors import Issue, SchemaError, pointer
from schema.history import CURRENT, describable, format_version
from schema.io import dump, unknown_fields
from schema.models import ENUMS, STRUCTS

#: Changes between a target version and ours that a downgrade handles exactly: new types, fields,
#: arms and enum values are dropped at their default or refused (`used_features` finds which);
#: a type the current version removed is never written; and since every field the target knows
#: is written, what the target's default is (or whether it has one) never comes into play.
_HANDLED = frozenset(
    {
        "type-added",
        "type-removed",
        "field-added-with-default",
        "field-added-required",
        "union-arm-added",
        "enum-value-added",
        "default-changed",
        "default-added",
        "default-removed",
        "field-order-changed",
        "field-id-reused",
    }
)
#: Whether a reader that lacks a field works out, from the rest of its struct (a JSON object),
#: the value the struct holds.
Derived = Callable[[dict[str, Any]], bool]
_RULES = {
    "field": "field-not-in-version",
    "arm": "arm-not-in-version",
    "enum": "enum-value-not-in-version",
}


class DowngradeRefused(SchemaError):
    """A document that a reader of the target version would read with a different meaning."""

    code = "downgrade-refused"

    def __init__(self, version: Version, issues: list[Issue]) -> None:
        self.version = format_version(version)
        self.issues = issues
        first = issues[0]
        more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
        super().__init__(
            f"cannot write schema {self.version} exactly: {first.code} at {first.path or '/'}: "
            f"{first.message}{more}"
        )


@dataclass(frozen=True)
class Downgraded:
    """A document as a reader of `version` reads it (a JSON tree), and the fields dropped."""

    tree: dict[str, Any]
    version: str
    #: ``Type.field`` of every field the target lacks that the document held at its default.
    dropped: list[str]

    def dump(self) -> bytes:
        """The tree's JSON bytes (compact; torch's float strings are already in the tree)."""
        return orjson.dumps(self.tree)


@dataclass(frozen=True)
class _Plan:
    """What a downgrade to one version does, worked out once per version."""

    #: per struct, the fields the target lacks
    drops: dict[str, frozenset[str]]
    #: the types from which a struct with fields to drop can be reached (the walk's extent)
    reaching: frozenset[str]
    unsupported: list[Issue]


def downgrade(
    doc: BaseModel, version: str | Version, derived: Mapping[str, Derived] | None = None
) -> Downgraded:
    """`doc` (an ExportedProgram, or any struct of the schema) as schema `version` writes it;
    DowngradeRefused lists what that version's reader would read differently.

    `derived` names fields (``Node.name``) whose value a reader that lacks them works out from
    the rest of the struct, with a test of whether it works out the value held: where it does,
    the field is dropped as a default is; where not, it is refused at its own pointer.
    """
    target = describable(version)
    derived = derived or {}
    plan = _plan(target)
    refused = list(plan.unsupported)
    tree: dict[str, Any] = orjson.loads(dump(doc))
    root = type(doc).__name__
    used = {
        path: use
        for path, use in used_features(doc).items()
        if _newer(use, target) and path not in derived
    }
    if used:
        refused += _located(tree, root, used, target)
    refused += [
        Issue("unknown-field", path, f"schema {format_version(CURRENT)} has no such field")
        for path in unknown_fields(doc)
    ]
    if refused:
        raise DowngradeRefused(target, refused)
    dropped: set[str] = set()
    if plan.drops:
        description = describe(CURRENT)
        for place in places(tree, description, root, plan.reaching.__contains__):
            names = plan.drops.get(place.type.name)
            value = place.value
            if not names or not isinstance(value, dict):
                continue
            for name in sorted(names & value.keys()):
                feature = f"{place.type.name}.{name}"
                test = derived.get(feature)
                if test is not None and value[name] != _wire_default(place.type.name, name):
                    if not test(value):
                        refused.append(_underived(feature, (*place.path, name), target))
                        continue
                del value[name]
                dropped.add(feature)
    if refused:
        raise DowngradeRefused(target, refused)
    if "schema_version" in tree:
        tree["schema_version"] = {"major": target[0], "minor": target[1]}
    return Downgraded(tree, format_version(target), sorted(dropped))


def _underived(feature: str, path: tuple[str | int, ...], target: Version) -> Issue:
    return Issue(
        "field-not-in-version",
        pointer(list(path)),
        f"{feature} holds a value a reader of schema {format_version(target)} (which has no "
        "such field) would not work out by itself",
    )


def _newer(use: Use, target: Version) -> bool:
    """A feature the target lacks that its reader meets (not one inside another it lacks)."""
    return use.since > target and use.seen_from <= target


@functools.cache
def _plan(target: Version) -> _Plan:
    old, new = describe(target), describe(CURRENT)
    drops = {
        name: frozenset(spec["fields"]) - frozenset(old[name]["fields"])
        for name, spec in _types(new).items()
        if spec["kind"] == "struct" and name in old
    }
    drops = {name: fields for name, fields in drops.items() if fields}
    unsupported = [
        Issue(
            "schema-change-unsupported",
            "",
            f"{change.message} ({change.rule} between {format_version(target)} and "
            f"{format_version(CURRENT)}) has no exact downgrade",
        )
        for change in diff(target, CURRENT).changes
        if change.rule not in _HANDLED
    ]
    return _Plan(drops, _reaching(new, frozenset(drops)), unsupported)


def _types(description: Description) -> dict[str, Any]:
    return {name: spec for name, spec in description.items() if isinstance(spec, dict)}


def _reaching(description: Description, goals: frozenset[str]) -> frozenset[str]:
    """The types whose values can hold a value of one of `goals` (themselves included)."""
    types = _types(description)
    refers: dict[str, set[str]] = {}
    for name, spec in types.items():
        if spec["kind"] != "enum":
            for field in spec["fields"].values():
                refers[name] = refers.get(name, set()) | _names(parse_type(field["type"]))
    found = set(goals)
    grew = True
    while grew:
        grew = False
        for name, inner in refers.items():
            if name not in found and inner & found:
                found.add(name)
                grew = True
    return frozenset(found)


def _names(t: TypeExpr) -> set[str]:
    return {t.name}.union(*(_names(a) for a in t.args))


def _located(tree: Any, root: str, used: dict[str, Use], target: Version) -> list[Issue]:
    """One issue per feature in `used`, at the first place the document holds it."""
    wanted: dict[str, list[tuple[str, Any]]] = {}
    for feature in used:
        owner, _, member = feature.partition(".")
        wanted.setdefault(owner, []).append((feature, member))
    found: dict[str, str] = {}
    for place in places(tree, describe(CURRENT), root):
        for feature, member in wanted.get(place.type.name, ()):
            use = used[feature]
            if feature not in found and _holds(place, use, member):
                # a field or an arm is pointed at by its key, an enum value where it is
                at = place.path if use.kind == "enum" else (*place.path, member)
                found[feature] = pointer(list(at))
        if len(found) == len(used):
            break
    return [
        Issue(
            _RULES[use.kind],
            found.get(feature, ""),
            f"{feature} is new in schema {format_version(use.since)}; schema "
            f"{format_version(target)} has no such {_NOUN[use.kind]}",
        )
        for feature, use in sorted(used.items(), key=lambda item: found.get(item[0], ""))
    ]


_NOUN = {"field": "field", "arm": "union arm", "enum": "enum value"}


def _holds(place: Any, use: Use, member: str) -> bool:
    """Whether the value at `place` is (or holds, not at its default) the feature `member`."""
    value = place.value
    owner = place.type.name
    if use.kind == "enum":
        enum = next(e for e in ENUMS if e.__name__ == owner)
        return bool(value == enum[member].value)
    if not isinstance(value, dict) or member not in value:
        return False
    if use.kind == "arm":
        return True
    return bool(value[member] != _wire_default(owner, member))


def _wire_default(struct: str, field: str) -> Any:
    """A field's default as the wire writes it; a field without one never equals it."""
    defaults = struct_defaults(STRUCTS[struct])
    if field not in defaults:
        return _NO_DEFAULT
    return orjson.loads(orjson.dumps(defaults[field]))


_NO_DEFAULT = object()
