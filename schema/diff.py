"""Schema diffs: every difference between two descriptions, one change per rule, with its flags.

A description is a schema version in the shape of torch's schema.yaml (see schema.description).
"Forward" is torch's and Avro's sense: old readers read documents of the new version;
"backward": new readers read documents of the old version.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import orjson
import yaml

from schema._base import Version
from schema.description import (
    Description,
    TypeExpr,
    arm_fields,
    describe,
    parse_type,
    struct_fields,
)
from schema.errors import DescriptionInvalid
from schema.history import describable, format_version
from schema.models import STRUCTS, UNIONS

Bump = Literal["major", "minor", "none"]
#: Bumps from the weakest to the strongest.
BUMPS: tuple[Bump, ...] = ("none", "minor", "major")
#: A description, or a known 8.x version (``"8.7"`` or ``(8, 7)``) standing for its description.
DescriptionLike = Description | str | Version

#: Upload limits of `load_description`; torch's own schema.yaml is about 10 KB and 55 types.
MAX_DESCRIPTION_BYTES = 1_000_000
MAX_TYPES = 2_000
MAX_FIELDS = 2_000
MAX_TYPE_LENGTH = 300
MAX_FLOW_DEPTH = 32

#: The C loader when PyYAML has it (ten times faster); aliases are refused before loading.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_NESTING = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}

_META = ("SCHEMA_VERSION", "TREESPEC_VERSION")
_KINDS = ("struct", "union", "enum")
_SCALARS = frozenset({"int", "str", "bool", "float"})
_ARITY = {"List": 1, "Dict": 2, "Optional": 1}


class Rule(NamedTuple):
    """A rule of the diff: what it means, what it breaks, and the version bump it requires."""

    description: str
    breaks_forward: bool
    breaks_backward: bool
    bump: Bump


#: The single source of every rule's flags. torch's schema_check treats added struct fields
#: without default, removed fields and type changes as major and every other addition as minor;
#: the same reasoning is kept here, plus whole-type removals (which torch's check lets through).
RULES: dict[str, Rule] = {
    "type-added": Rule(
        "a type was added; documents reach it only through a field or arm, a change of its own",
        False,
        False,
        "minor",
    ),
    "type-removed": Rule(
        "a type was removed; new readers cannot read old documents that contain it",
        False,
        True,
        "major",
    ),
    "kind-changed": Rule(
        "a type changed kind (struct, union, enum), so its wire form changed",
        True,
        True,
        "major",
    ),
    "field-added-with-default": Rule(
        "a struct field was added with a default; new readers fill it in old documents, "
        "old readers ignore it in new ones",
        False,
        False,
        "minor",
    ),
    "field-added-required": Rule(
        "a struct field was added without a default; new readers refuse old documents lacking it",
        False,
        True,
        "major",
    ),
    "field-removed": Rule(
        "a struct field was removed; old readers miss it in new documents, "
        "new readers ignore it in old ones",
        True,
        False,
        "major",
    ),
    "field-type-changed": Rule(
        "the type of a struct field or union arm changed; neither side reads the other's values",
        True,
        True,
        "major",
    ),
    "default-changed": Rule(
        "a field's default changed; documents that omit the field read differently on each side",
        True,
        True,
        "major",
    ),
    "default-added": Rule(
        "a required field got a default; new writers may omit it and old readers refuse that",
        True,
        False,
        "minor",
    ),
    "default-removed": Rule(
        "a field lost its default; new readers refuse old documents that omit it",
        False,
        True,
        "major",
    ),
    "union-arm-added": Rule(
        "a union gained an arm; old readers fail on new documents that use it",
        True,
        False,
        "minor",
    ),
    "union-arm-removed": Rule(
        "a union lost an arm; new readers fail on old documents that use it",
        False,
        True,
        "major",
    ),
    "enum-value-added": Rule(
        "an enum gained a value; old readers fail on new documents that use it",
        True,
        False,
        "minor",
    ),
    "enum-value-removed": Rule(
        "an enum lost a value; new readers fail on old documents that use it",
        False,
        True,
        "major",
    ),
    "enum-value-renumbered": Rule(
        "an enum value changed its number; each side reads the other's value as another one",
        True,
        True,
        "major",
    ),
    "field-order-changed": Rule(
        "the order of a type's fields changed; JSON objects and one-key unions do not depend on it",
        False,
        False,
        "none",
    ),
    "field-id-reused": Rule(
        "a field was removed and another added under the same field id; id-keyed wire forms "
        "(torch's thrift schema) would read one as the other",
        True,
        True,
        "major",
    ),
}


@dataclass(frozen=True)
class Change:
    """One difference between two descriptions; the flags and bump come from `RULES`."""

    rule: str
    path: str
    old: Any
    new: Any
    breaks_forward: bool
    breaks_backward: bool
    bump: Bump

    @property
    def old_text(self) -> str:
        """The old side as the changelog writes it (`Optional[str] = None`, `-` for none)."""
        return _show(self.old)

    @property
    def new_text(self) -> str:
        """The new side as the changelog writes it."""
        return _show(self.new)

    @property
    def message(self) -> str:
        """A readable one-line account of the change."""
        return f"{self.path}: {self.rule} ({self.old_text} -> {self.new_text})"


def change(rule: str, path: str, old: Any, new: Any) -> Change:
    """A Change of `rule` with the flags the rule table gives it."""
    r = RULES[rule]
    return Change(rule, path, old, new, r.breaks_forward, r.breaks_backward, r.bump)


def stronger(a: Bump, b: Bump) -> Bump:
    """The stronger of two bumps."""
    return a if BUMPS.index(a) >= BUMPS.index(b) else b


@dataclass(frozen=True)
class SchemaDiff:
    """Every change from one description to another."""

    old_version: str
    new_version: str
    changes: list[Change]

    @property
    def required_bump(self) -> Bump:
        """The strongest bump any change requires."""
        out: Bump = "none"
        for c in self.changes:
            out = stronger(out, c.bump)
        return out

    @property
    def breaking_forward(self) -> list[Change]:
        """The changes that break old readers of new documents."""
        return [c for c in self.changes if c.breaks_forward]

    @property
    def breaking_backward(self) -> list[Change]:
        """The changes that break new readers of old documents."""
        return [c for c in self.changes if c.breaks_backward]


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict) and "type" in value:
        default = f" = {value['default']}" if "default" in value else ""
        return f"{value['type']}{default}"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


# ---------------------------------------------------------------- descriptions


def describe_with_ids(version: str | Version) -> Description:
    """`describe(version)` with each struct field and union arm carrying its torch field id."""
    loaded: Description = orjson.loads(_described_with_ids(describable(version)))
    return loaded


@functools.cache
def _described_with_ids(v: Version) -> bytes:
    """The description as JSON bytes: cached once per version, every caller gets a fresh copy."""
    out = describe(v)
    histories = [(name, struct_fields(model)) for name, model in STRUCTS.items()]
    histories += [(name, arm_fields(union)) for name, union in UNIONS.items()]
    for name, history in histories:
        fields = out.get(name, {}).get("fields", {})
        for f in history:
            if f.name in fields and f.since <= v and (f.until is None or v < f.until):
                fields[f.name]["id"] = f.id
    return orjson.dumps(out)


def load_description(text: str | bytes) -> Description:
    """Parse an uploaded schema.yaml (or its JSON form) safely and check its shape."""
    if len(text) > MAX_DESCRIPTION_BYTES:
        raise DescriptionInvalid(
            f"the description is {len(text)} bytes; at most {MAX_DESCRIPTION_BYTES} are read"
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DescriptionInvalid(f"the description is not UTF-8: {exc}") from None
    if _flow_depth(text) > MAX_FLOW_DEPTH:
        raise DescriptionInvalid("the description is nested too deeply")
    try:
        if text.lstrip().startswith("{"):
            data = orjson.loads(text)
        else:
            if any(isinstance(e, yaml.AliasEvent) for e in yaml.parse(text, Loader=_LOADER)):
                raise DescriptionInvalid("the description uses a YAML alias; write it out instead")
            data = yaml.load(text, Loader=_LOADER)
    except orjson.JSONDecodeError as exc:
        raise DescriptionInvalid(f"the description is not valid JSON: {exc}") from None
    except yaml.YAMLError as exc:
        raise DescriptionInvalid(f"the description is not valid YAML: {exc}") from None
    except RecursionError:
        raise DescriptionInvalid("the description is nested too deeply") from None
    return check_description(data)


def _flow_depth(text: str) -> int:
    """How deep ``[`` and ``{`` nest (quotes ignored): libyaml slows down quadratically with it."""
    brackets = text.encode("utf-8", "replace").translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(map(_NESTING.__getitem__, brackets)), default=0)


def check_description(data: Any) -> Description:
    """Check a description's shape; return it unchanged or raise DescriptionInvalid."""
    if not isinstance(data, dict):
        raise DescriptionInvalid(
            "a description maps type names to {kind, fields} and has SCHEMA_VERSION [major, minor]"
        )
    version_of(data)
    treespec = data.get("TREESPEC_VERSION")
    if treespec is not None and (not isinstance(treespec, int) or isinstance(treespec, bool)):
        raise DescriptionInvalid(f"TREESPEC_VERSION must be an integer, not {treespec!r}")
    types = {k: v for k, v in data.items() if k not in _META}
    if len(types) > MAX_TYPES:
        raise DescriptionInvalid(f"the description has {len(types)} types; at most {MAX_TYPES}")
    for name, spec in types.items():
        _check_type(name, spec, types)
    return data


def version_of(description: Description) -> Version:
    """The SCHEMA_VERSION of a description as a tuple."""
    raw = description.get("SCHEMA_VERSION")
    if not (
        isinstance(raw, list)
        and len(raw) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in raw)
    ):
        raise DescriptionInvalid(
            f"SCHEMA_VERSION must be a list [major, minor] of two integers, not {raw!r}"
        )
    return raw[0], raw[1]


def _check_type(name: Any, spec: Any, types: dict[str, Any]) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise DescriptionInvalid(f"type name {name!r} is not an identifier")
    if not isinstance(spec, dict) or set(spec) != {"kind", "fields"}:
        raise DescriptionInvalid(f"{name}: a type has exactly the keys kind and fields")
    kind, fields = spec["kind"], spec["fields"]
    if kind not in _KINDS:
        raise DescriptionInvalid(f"{name}: kind must be one of {', '.join(_KINDS)}, not {kind!r}")
    if not isinstance(fields, dict):
        raise DescriptionInvalid(f"{name}: fields must be a mapping")
    if len(fields) > MAX_FIELDS:
        raise DescriptionInvalid(f"{name}: {len(fields)} fields; at most {MAX_FIELDS}")
    for field, fspec in fields.items():
        where = f"{name}.{field}"
        if not isinstance(field, str) or not field.isidentifier():
            raise DescriptionInvalid(f"{name}: field name {field!r} is not an identifier")
        if kind == "enum":
            if not isinstance(fspec, int) or isinstance(fspec, bool):
                raise DescriptionInvalid(f"{where}: an enum value must be an integer")
            continue
        _check_field(where, kind, fspec, types)


def _check_field(where: str, kind: str, spec: Any, types: dict[str, Any]) -> None:
    allowed = {"type", "default", "id"} if kind == "struct" else {"type", "id"}
    if not isinstance(spec, dict) or "type" not in spec or not set(spec) <= allowed:
        keys = ", ".join(sorted(allowed))
        raise DescriptionInvalid(f"{where}: a {kind} field has the keys {keys}")
    text = spec["type"]
    if not isinstance(text, str) or len(text) > MAX_TYPE_LENGTH:
        raise DescriptionInvalid(f"{where}: type must be a string of at most {MAX_TYPE_LENGTH}")
    try:
        _check_refs(parse_type(text), types)
    except DescriptionInvalid as exc:
        raise DescriptionInvalid(f"{where}: {exc}") from None
    if "default" in spec and not isinstance(spec["default"], str):
        raise DescriptionInvalid(f"{where}: default must be a string as torch writes it")
    if "id" in spec and (not isinstance(spec["id"], int) or isinstance(spec["id"], bool)):
        raise DescriptionInvalid(f"{where}: id must be an integer")


def _check_refs(t: TypeExpr, types: dict[str, Any]) -> None:
    if t.name in _ARITY:
        if len(t.args) != _ARITY[t.name]:
            raise DescriptionInvalid(f"{t.name} takes {_ARITY[t.name]} type argument(s) in {t}")
        for arg in t.args:
            _check_refs(arg, types)
    elif t.name == "Tuple":
        for arg in t.args:
            if arg != TypeExpr("()"):
                _check_refs(arg, types)
    elif t.args:
        raise DescriptionInvalid(f"{t.name} takes no type arguments in {t}")
    elif t.name not in _SCALARS and t.name not in types:
        raise DescriptionInvalid(f"unknown type {t.name!r}")


def resolve(description: DescriptionLike) -> Description:
    """A checked description: a dict as given, or a known version's description with field ids."""
    if isinstance(description, dict):
        return check_description(description)
    return describe_with_ids(description)


# ---------------------------------------------------------------- the diff


def diff(old: DescriptionLike, new: DescriptionLike) -> SchemaDiff:
    """Every change from `old` to `new`, types in name order, fields in declaration order."""
    a, b = resolve(old), resolve(new)
    changes: list[Change] = []
    names = sorted((set(a) | set(b)) - set(_META))
    for name in names:
        if name not in b:
            changes.append(change("type-removed", name, a[name]["kind"], None))
        elif name not in a:
            changes.append(change("type-added", name, None, b[name]["kind"]))
        elif a[name]["kind"] != b[name]["kind"]:
            changes.append(change("kind-changed", name, a[name]["kind"], b[name]["kind"]))
        else:
            changes.extend(_diff_type(name, a[name]["kind"], a[name]["fields"], b[name]["fields"]))
    return SchemaDiff(format_version(version_of(a)), format_version(version_of(b)), changes)


def _spec(field: dict[str, Any]) -> dict[str, Any]:
    return {k: field[k] for k in ("type", "default") if k in field}


def _diff_type(name: str, kind: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    if kind == "enum":
        return [*_diff_enum(name, old, new), *_diff_order(name, old, new)]
    out: list[Change] = []
    union = kind == "union"
    for field, spec in old.items():
        path = f"{name}.{field}"
        if field not in new:
            rule = "union-arm-removed" if union else "field-removed"
            out.append(change(rule, path, _spec(spec), None))
        else:
            out.extend(_diff_field(path, spec, new[field]))
    for field, spec in new.items():
        if field not in old:
            if union:
                rule = "union-arm-added"
            elif "default" in spec:
                rule = "field-added-with-default"
            else:
                rule = "field-added-required"
            out.append(change(rule, f"{name}.{field}", None, _spec(spec)))
    out.extend(_diff_ids(name, old, new))
    out.extend(_diff_order(name, old, new))
    return out


def _diff_field(path: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    out: list[Change] = []
    if old["type"] != new["type"]:
        out.append(change("field-type-changed", path, old["type"], new["type"]))
    if "default" in old and "default" in new and old["default"] != new["default"]:
        out.append(change("default-changed", path, old["default"], new["default"]))
    elif "default" in new and "default" not in old:
        out.append(change("default-added", path, None, new["default"]))
    elif "default" in old and "default" not in new:
        out.append(change("default-removed", path, old["default"], None))
    return out


def _diff_enum(name: str, old: dict[str, int], new: dict[str, int]) -> list[Change]:
    out: list[Change] = []
    for value, number in old.items():
        if value not in new:
            out.append(change("enum-value-removed", f"{name}.{value}", number, None))
        elif new[value] != number:
            out.append(change("enum-value-renumbered", f"{name}.{value}", number, new[value]))
    out.extend(
        change("enum-value-added", f"{name}.{value}", None, number)
        for value, number in new.items()
        if value not in old
    )
    return out


def _diff_ids(name: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    removed = {s["id"]: f for f, s in old.items() if f not in new and "id" in s}
    return [
        change("field-id-reused", f"{name}.{field}", removed[spec["id"]], field)
        for field, spec in new.items()
        if field not in old and spec.get("id") in removed
    ]


def _diff_order(name: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    before = [f for f in old if f in new]
    after = [f for f in new if f in old]
    return [] if before == after else [change("field-order-changed", name, before, after)]


def changelog(result: SchemaDiff) -> str:
    """A markdown changelog of a diff: one table row per change, breaking ones flagged."""
    lines = [
        f"## Schema {result.old_version} -> {result.new_version}",
        "",
        f"{len(result.changes)} changes; required bump: **{result.required_bump}**; "
        f"{len(result.breaking_forward)} break old readers, "
        f"{len(result.breaking_backward)} break new readers.",
        "",
        "| rule | path | old | new | breaks old readers | breaks new readers | bump |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in result.changes:
        lines.append(
            f"| {c.rule} | `{c.path}` | {_cell(c.old)} | {_cell(c.new)} | "
            f"{'yes' if c.breaks_forward else ''} | {'yes' if c.breaks_backward else ''} | "
            f"{c.bump} |"
        )
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    return _show(value).replace("|", "\\|")
