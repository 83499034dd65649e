"""Compatibility: verdicts between schema versions, and which torch releases read a document."""

from __future__ import annotations

import functools
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any, Literal

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from schema._base import FIRST_8X, FIRST_KNOWN, Arm, Version
from schema.description import Description, field_annotation, field_wire, union_arms
from schema.diff import (
    Bump,
    Change,
    DescriptionLike,
    describe_with_ids,
    diff,
    resolve,
    stronger,
    version_of,
)
from schema.errors import SchemaError
from schema.history import RELEASES, format_version, versions
from schema.io import load, unknown_fields
from schema.models import ENUMS, UNIONS, SchemaVersion
from schema.readers import READERS


class UnknownMode(SchemaError):
    """A compatibility mode that is not one of `Mode`."""

    code = "unknown-compatibility-mode"


class Mode(StrEnum):
    """Avro-style compatibility modes; the transitive ones check every known version between."""

    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        """Whether every known version between old and new is checked against new."""
        return self.value.endswith("_TRANSITIVE")

    @property
    def forward(self) -> bool:
        """Whether old readers must read new documents."""
        return self.value.startswith(("FORWARD", "FULL"))

    @property
    def backward(self) -> bool:
        """Whether new readers must read old documents."""
        return self.value.startswith(("BACKWARD", "FULL"))


@dataclass(frozen=True)
class Verdict:
    """Whether `new` is compatible with `old` in `mode`, and whether the version numbers agree."""

    ok: bool
    mode: Mode
    old_version: str
    new_version: str
    violations: list[Change]
    required_bump: Bump
    actual_bump: Bump
    numbers_follow_rules: bool
    message: str | None
    #: The changes that need a stronger bump than the version numbers show.
    unmet: list[Change]
    #: The (old, new) version pairs that were diffed.
    checked: list[tuple[str, str]]


def compatibility(old: DescriptionLike, new: DescriptionLike, mode: Mode | str) -> Verdict:
    """The verdict of going from `old` to `new` under `mode` (BACKWARD, FORWARD, FULL, ...)."""
    try:
        m = Mode(mode.upper() if isinstance(mode, str) else mode)
    except ValueError:
        known = ", ".join(Mode)
        raise UnknownMode(f"unknown compatibility mode {mode!r}; known: {known}") from None
    a, b = resolve(old), resolve(new)
    va, vb = version_of(a), version_of(b)
    whole = diff(a, b)
    earlier: list[Description] = [a]
    if m.transitive:
        earlier += [describe_with_ids(v) for v in _between(va, vb)]
    violations: list[Change] = []
    seen: set[tuple[str, str, str, str]] = set()
    checked: list[tuple[str, str]] = []
    for d in earlier:
        pair = whole if d is a else diff(d, b)
        checked.append((pair.old_version, pair.new_version))
        for c in pair.changes:
            key = (c.rule, c.path, repr(c.old), repr(c.new))
            if key not in seen and _violates(c, m):
                seen.add(key)
                violations.append(c)
    required = whole.required_bump
    actual = _actual_bump(va, vb)
    unmet = [c for c in whole.changes if stronger(c.bump, actual) != actual]
    follows = vb >= va and not unmet
    return Verdict(
        ok=not violations,
        mode=m,
        old_version=format_version(va),
        new_version=format_version(vb),
        violations=violations,
        required_bump=required,
        actual_bump=actual,
        numbers_follow_rules=follows,
        message=None if follows else _numbers_message(va, vb, actual, unmet),
        unmet=unmet,
        checked=checked,
    )


def _violates(c: Change, mode: Mode) -> bool:
    return (mode.forward and c.breaks_forward) or (mode.backward and c.breaks_backward)


def _between(old: Version, new: Version) -> list[Version]:
    return [k.version for k in versions() if k.describable and old < k.version < new]


def _actual_bump(old: Version, new: Version) -> Bump:
    if new[0] > old[0]:
        return "major"
    if new[0] == old[0] and new[1] > old[1]:
        return "minor"
    return "none"


def _numbers_message(old: Version, new: Version, actual: Bump, unmet: list[Change]) -> str:
    went = f"SCHEMA_VERSION went {format_version(old)} -> {format_version(new)}"
    if new < old:
        return f"{went}: backwards"
    reasons = "; ".join(f"{c.message} needs {c.bump}" for c in unmet)
    return f"{went} ({actual} bump), but {len(unmet)} change(s) need more: {reasons}"


# ---------------------------------------------------------------- documents

FeatureKind = Literal["field", "arm", "enum"]
#: What a torch release does with a feature it does not know.
_EFFECT: dict[FeatureKind, str] = {
    "field": "an unknown field, ignored: its value is lost",
    "arm": "an unknown union arm: reading fails",
    "enum": "an unknown enum value: reading fails",
}


@dataclass(frozen=True)
class Compat:
    """Which schema versions and torch releases can read a document, from the features it uses."""

    min_version: str
    #: Every feature used (``Type.field``, ``Union.arm``, ``Enum.VALUE``) with its first version.
    features: list[tuple[str, str]]
    #: The releases that read every feature the document uses.
    readable_by: list[str]
    not_readable_by: list[tuple[str, str]]
    #: The releases that read the document but ignore fields they do not know, with those fields.
    read_ignoring: list[tuple[str, str]]


@functools.cache
def struct_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """The fields of a struct that have a default, with that default."""
    return {
        name: info.get_default(call_default_factory=True)
        for name, info in model.model_fields.items()
        if info.default is not PydanticUndefined or info.default_factory is not None
    }


@functools.cache
def _arms() -> dict[type[Arm], str]:
    out: dict[type[Arm], str] = {}
    for name, union in UNIONS.items():
        for arm in union_arms(union)[1]:
            out[arm] = f"{name}.{arm.__tag__}"
    return out


def _enum_since(member: IntEnum) -> Version:
    since, values = ENUMS[type(member)]
    return values.get(member, since)


#: What the walk of a document descends into or notes; scalars are neither.
_WALKED = (BaseModel, list, dict, IntEnum)
_NO_DEFAULT: Any = object()


@dataclass(frozen=True)
class _Field:
    """What the walk of a document needs of one field of a model class."""

    name: str
    #: the feature the field is: ``Type.field``, or ``Union.arm`` for an arm's one field
    path: str
    kind: FeatureKind
    since: Version
    default: Any
    #: the newest version a value of the field can hold below it (fields, arms, enum values)
    below: Version


def _types_in(annotation: Any) -> list[type]:
    found: list[type] = []
    stack = [annotation]
    while stack:
        t = stack.pop()
        if isinstance(t, type) and issubclass(t, BaseModel | IntEnum):
            found.append(t)
        else:
            stack.extend(typing.get_args(t))
    return found


@functools.cache
def _field_types(model: type[BaseModel]) -> dict[str, list[type]]:
    return {name: _types_in(field_annotation(i)) for name, i in model.model_fields.items()}


def _enum_newest(enum: type) -> Version:
    since, values = ENUMS.get(enum, (FIRST_KNOWN, {}))
    return max([since, *values.values()])


def _own_newest(model: type[BaseModel]) -> Version:
    """The newest field of `model` or enum value its fields hold directly."""
    fields = [field_wire(i).since for i in model.model_fields.values()]
    enums = [_enum_newest(t) for ts in _field_types(model).values() for t in ts if t in ENUMS]
    return max([FIRST_KNOWN, *fields, *enums])


@functools.cache
def _ceiling(model: type[BaseModel]) -> Version:
    """The newest version an instance of `model` can use: in every class it reaches, cycles too."""
    best = FIRST_KNOWN
    seen: set[type] = set()
    stack: list[type] = [model]
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        best = max(best, _own_newest(t))
        stack.extend(n for ts in _field_types(t).values() for n in ts if issubclass(n, BaseModel))
    return best


def _below(types: list[type]) -> Version:
    return max(
        [FIRST_KNOWN]
        + [_ceiling(t) if issubclass(t, BaseModel) else _enum_newest(t) for t in types]
    )


@functools.cache
def _plan(model: type[BaseModel]) -> tuple[_Field, ...]:
    """What the walk of a document needs of each field of `model`."""
    defaults = struct_defaults(model)
    arm = _arms().get(model) if issubclass(model, Arm) else None
    kind: FeatureKind = "arm" if arm else "field"
    types = _field_types(model)
    return tuple(
        _Field(
            name,
            arm or f"{model.__name__}.{name}",
            kind,
            field_wire(info).since,
            defaults.get(name, _NO_DEFAULT),
            _below(types[name]),
        )
        for name, info in model.model_fields.items()
    )


@functools.cache
def _live(model: type[BaseModel], best: Version) -> tuple[_Field, ...]:
    """The fields of `model` that can raise a document's newest version above `best`."""
    return tuple(f for f in _plan(model) if f.since > best or f.below > best)


@dataclass(frozen=True)
class Use:
    """A feature a document uses: its first version, its kind, and its most visible occurrence.

    `seen_from` is the newest first version among the fields enclosing that occurrence: a
    reader older than it skips an enclosing field it does not know, so never meets the feature.
    """

    since: Version
    kind: FeatureKind
    seen_from: Version


def _walk(doc: BaseModel, found: dict[str, Use] | None) -> Version:
    """The newest first version among the features `doc` uses: fields not at their default
    (a field without one always), union arms, enum values. With `found`, every feature is noted
    in it; without, a part of the document that holds nothing newer than the newest feature
    met so far is skipped."""
    best = FIRST_KNOWN

    def note(path: str, since: Version, kind: FeatureKind, seen_from: Version) -> None:
        if found is not None:
            old = found.get(path)
            if old is None or seen_from < old.seen_from:
                found[path] = Use(since, kind, seen_from)

    stack: list[tuple[Any, Version]] = [(doc, FIRST_KNOWN)]
    while stack:
        value, seen_from = stack.pop()
        if isinstance(value, BaseModel):
            # unnoted, only what can raise the version above the newest met so far is looked at
            fields = _plan(type(value)) if found is not None else _live(type(value), best)
            for f in fields:
                item = getattr(value, f.name)
                if f.default is not _NO_DEFAULT and item == f.default:
                    continue
                best = max(best, f.since)
                note(f.path, f.since, f.kind, seen_from)
                if isinstance(item, _WALKED):
                    stack.append((item, max(seen_from, f.since)))
        elif isinstance(value, list | dict):
            items = value.values() if isinstance(value, dict) else value
            stack.extend((item, seen_from) for item in items if isinstance(item, _WALKED))
        elif isinstance(value, IntEnum) and type(value) in ENUMS:
            since = _enum_since(value)
            best = max(best, since)
            note(f"{type(value).__name__}.{value.name}", since, "enum", seen_from)
    return best


def newest_used(doc: BaseModel) -> Version:
    """The newest schema version among the fields (not at their default), union arms and enum
    values a document uses: the one definition of what a document needs of a schema."""
    return _walk(doc, None)


def used_features(doc: BaseModel) -> dict[str, Use]:
    """The features a document uses (as `newest_used` counts them), with their versions."""
    found: dict[str, Use] = {}
    _walk(doc, found)
    return found


Policy = Literal["fatal", "skip"]


def present_keys(doc: BaseModel) -> dict[str, Version | None]:
    """Every struct key the document holds (``Type.field``) newer than the oldest known version,
    with the version it appeared in; None for a key no known version declares. What torch writes
    holds every field, defaults too (its `_dataclass_to_dict`), as ours does; a parsed document
    holds the keys its bytes held."""
    floor = FIRST_KNOWN
    found: dict[str, Version | None] = {}
    stack: list[Any] = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, BaseModel):
            keyed = not isinstance(value, Arm)
            given = value.model_fields_set
            for f in _live(type(value), floor):
                item = getattr(value, f.name)
                if (
                    keyed
                    and f.since > floor
                    and (f.name in given or f.default is _NO_DEFAULT or item != f.default)
                ):
                    found.setdefault(f.path, f.since)
                if isinstance(item, _WALKED):
                    stack.append(item)
            if keyed:
                for key in value.__pydantic_extra__ or {}:
                    found.setdefault(f"{type(value).__name__}.{key}", None)
        elif isinstance(value, list | dict):
            items = value.values() if isinstance(value, dict) else value
            stack.extend(item for item in items if isinstance(item, _WALKED))
    return found


def _newer_than(doc: BaseModel, floor: Version) -> tuple[dict[str, Use], dict[str, Version | None]]:
    """`_walk`'s features and `present_keys`' keys newer than `floor`, in one walk of the
    parts of the document that can hold them."""
    used: dict[str, Use] = {}
    present: dict[str, Version | None] = {}
    stack: list[tuple[Any, Version]] = [(doc, FIRST_KNOWN)]
    while stack:
        value, seen_from = stack.pop()
        if isinstance(value, BaseModel):
            keyed = not isinstance(value, Arm)
            given = value.model_fields_set
            for f in _live(type(value), floor):
                item = getattr(value, f.name)
                at_default = f.default is not _NO_DEFAULT and item == f.default
                if f.since > floor:
                    if keyed and (f.name in given or not at_default) and f.path not in present:
                        present[f.path] = f.since
                    if not at_default:
                        old = used.get(f.path)
                        if old is None or seen_from < old.seen_from:
                            used[f.path] = Use(f.since, f.kind, seen_from)
                if not at_default and isinstance(item, _WALKED):
                    stack.append((item, max(seen_from, f.since)))
        elif isinstance(value, list | dict):
            items = value.values() if isinstance(value, dict) else value
            stack.extend((item, seen_from) for item in items if isinstance(item, _WALKED))
        elif isinstance(value, IntEnum) and type(value) in ENUMS:
            since = _enum_since(value)
            path = f"{type(value).__name__}.{value.name}"
            old = used.get(path)
            if since > floor and (old is None or seen_from < old.seen_from):
                used[path] = Use(since, "enum", seen_from)
    return used, present


@dataclass(frozen=True)
class DocumentUse:
    """What a reader meets in a document: its major, the features it uses, the keys it holds."""

    major: int | None
    used: dict[str, Use]
    present: dict[str, Version | None]


def document_use(doc: BaseModel, unknown: Sequence[str] | None = None) -> DocumentUse:
    """The parts of `doc` (an ExportedProgram) that decide which 8.x readers load it: what it
    holds newer than the first 8.x version. `unknown` is `schema.unknown_fields(doc)` when the
    caller has it (a read notes them), else it is worked out."""
    declared = getattr(doc, "schema_version", None)
    major = declared.major if isinstance(declared, SchemaVersion) else None
    used, present = _newer_than(doc, FIRST_8X)
    # every undeclared key, as its JSON pointer (wherever it is)
    for path in unknown_fields(doc) if unknown is None else unknown:
        present.setdefault(path, None)
    return DocumentUse(major, used, present)


@dataclass(frozen=True)
class Reading:
    """Whether the reader of one torch release loads a document, and what it loses or why not."""

    readable: bool
    #: fields it reads past, their values lost (``Node.name``), only when readable
    ignoring: tuple[str, ...]
    #: why it fails, when not readable
    reasons: tuple[str, ...]
    #: the ignored fields, each with the version it appeared in (for messages)
    ignored_since: tuple[tuple[str, Version], ...] = ()


def reading(use: DocumentUse, version: Version, unknown_keys: Policy, release: str) -> Reading:
    """What the reader of `release` (writing schema `version`, `unknown_keys` its policy on keys
    it does not declare) makes of a document: a major other than its own, an unknown union arm
    or enum value fail in every release; an unknown key fails up to torch 2.8 (`cls(**data)`)
    and is skipped from 2.9, its value lost."""
    if use.major is not None and version[0] != use.major:
        # its version check refuses the document before reading any of it
        major = (
            f"it writes schema {format_version(version)} and refuses documents of another major "
            f"(this one is {use.major}.x)"
        )
        return Reading(False, (), (major,))
    reasons: list[str] = []
    if unknown_keys == "fatal":
        unknown = sorted(
            ((since is None, since or version, path) for path, since in use.present.items()),
        )
        reasons += [
            f"unknown key {path}{'' if newest else f' (since {format_version(since)})'}: "
            f"torch {release}'s reader refuses keys it does not know"
            for newest, since, path in unknown
            if newest or since > version
        ]
    missing = _unknown(version, use.used)
    failing = [(since, path, kind) for since, path, kind in missing if kind != "field"]
    if failing:
        lacks = "; ".join(
            f"{path} (since {format_version(since)}; {_EFFECT[kind]})"
            for since, path, kind in failing
        )
        reasons.append(f"schema {format_version(version)} lacks {lacks}")
    if reasons:
        return Reading(False, (), tuple(reasons))
    ignored = tuple((path, since) for since, path, kind in missing if kind == "field")
    return Reading(True, tuple(path for path, _ in ignored), (), ignored)


def reader_policy(release: str) -> Policy:
    """The policy of `release`'s reader on keys it does not know (`schema.readers`, generated
    from each release): "fatal" where no release of its minor is in the table and it is older."""
    minor = ".".join(release.split(".")[:2])
    found = READERS.get(minor)
    if found is not None:
        return found
    newer = [m for m in READERS if _minor_key(m) > _minor_key(minor)]
    return "fatal" if newer else "skip"


def _minor_key(minor: str) -> tuple[int, int]:
    major, _, rest = minor.partition(".")
    return int(major), int(rest)


def compat(doc: BaseModel | bytes | str) -> Compat:
    """The oldest schema version and the torch releases that read `doc` (an ExportedProgram)."""
    model = load(doc) if isinstance(doc, bytes | str) else doc
    use = document_use(model)
    used = used_features(model)
    floor = sorted(v for v in RELEASES if v[0] == use.major)[:1]
    need = max([u.since for u in used.values()] + floor, default=FIRST_KNOWN)
    readable: list[str] = []
    not_readable: list[tuple[str, str]] = []
    ignoring: list[tuple[str, str]] = []
    for v, releases in sorted(RELEASES.items()):
        for release in releases:
            read = reading(use, v, reader_policy(release), release)
            if not read.readable:
                not_readable.append((release, "; ".join(read.reasons)))
            elif read.ignoring:
                ignoring.append((release, ignoring_message(v, read)))
            else:
                readable.append(release)
    features = sorted(used.items(), key=lambda item: (item[1].since, item[0]))
    return Compat(
        min_version=format_version(need),
        features=[(path, format_version(u.since)) for path, u in features],
        readable_by=readable,
        not_readable_by=not_readable,
        read_ignoring=ignoring,
    )


def _unknown(v: Version, used: dict[str, Use]) -> list[tuple[Version, str, FeatureKind]]:
    """The features newer than `v` that a reader of `v` meets, oldest first."""
    return sorted(
        (u.since, path, u.kind) for path, u in used.items() if u.since > v and u.seen_from <= v
    )


def ignoring_message(v: Version, read: Reading) -> str:
    """The fields a reader of `v` skips, losing them, as one sentence."""
    fields = ", ".join(
        f"{path} (since {format_version(since)})" for path, since in read.ignored_since
    )
    lost = "its value is" if len(read.ignored_since) == 1 else "their values are"
    return f"reads it, ignoring {fields}, which schema {format_version(v)} lacks: {lost} lost"
