"""Documents of other schema versions: older 8.x upgraded, newer 8.x kept, 7.x upgraded."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import orjson

from schema._base import FIRST_8X, Version
from schema._tree import places
from schema.compat import struct_defaults
from schema.description import describe
from schema.errors import DocumentInvalid, Issue, UnsupportedMajor, pointer
from schema.history import CURRENT, format_version
from schema.io import Read, not_json, read
from schema.models import STRUCTS, ExportedProgram

#: The one major before ours that JSON-level upgraders exist for.
UPGRADABLE_MAJOR = 7
SUPPORTED = (
    f"{CURRENT[0]}.x (up to {format_version(CURRENT)} upgraded, newer {CURRENT[0]}.x read with "
    f"their unknown fields kept) and {UPGRADABLE_MAJOR}.x (upgraded to {format_version(CURRENT)})"
)

#: The unions whose ``as_none`` arm was ``Tuple[()]`` (written ``[]``) before 8.2 and is now bool.
_NONE_UNIONS = frozenset({"Argument", "ConstantValue", "OptionalTensorArgument"})
_INFINITE = frozenset({"Infinity", "-Infinity"})


@dataclass(frozen=True)
class Upgraded:
    """A document read as the current schema, and how it got there."""

    document: ExportedProgram
    from_version: str
    #: The version the document declares now: ours, or its own when it is a newer 8.x.
    to_version: str
    steps: list[str]
    #: JSON pointers of the keys the current schema does not declare (kept, not dropped).
    unknown_fields: list[str]


class _NonFinite:
    """A bare ``Infinity``/``-Infinity``/``NaN`` token, which strict JSON (and orjson) refuses."""

    def __init__(self, text: str) -> None:
        self.text = text


def upgrade(raw: bytes | str) -> Upgraded:
    """Read a document of any supported schema version as the current one; see `SUPPORTED`."""
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    current = _read_current(data)
    if current is not None:
        return current
    tree, json_error = _parse(data)
    version = _schema_version(tree)
    if version[0] == CURRENT[0]:
        if json_error is not None:
            raise DocumentInvalid([Issue("invalid-json", "", json_error)])
        return _read(data, version, [])
    if version[0] == UPGRADABLE_MAJOR:
        steps = _upgrade_7x(tree)
        if json_error is not None:
            _refuse_leftover_tokens(tree)
        try:
            upgraded = orjson.dumps(tree)
        except orjson.JSONEncodeError as exc:
            raise DocumentInvalid([Issue("invalid-json", "", str(exc))]) from None
        return _read(upgraded, version, steps)
    raise UnsupportedMajor(
        f"schema version {format_version(version)} is not supported; supported: {SUPPORTED}"
    )


def _read_current(data: bytes) -> Upgraded | None:
    """A valid document of our major, read in one pass; None when the careful path must decide.

    Pydantic's JSON parser takes bare NaN/Infinity tokens, which 8.x documents must not have,
    so bytes that could hold one go the careful way.
    """
    if b"NaN" in data or b"Infinity" in data:
        return None
    try:
        found = read(data, ExportedProgram)
    except DocumentInvalid:
        return None
    declared = found.document.schema_version
    if declared.major != CURRENT[0]:
        return None
    return _upgraded(found, (declared.major, declared.minor), [])


def _parse(data: bytes) -> tuple[Any, str | None]:
    """The JSON tree; where only bare non-finite tokens (old torch's json.dumps) make it invalid
    JSON, the tree with those tokens marked, and orjson's complaint."""
    try:
        return orjson.loads(data), None
    except orjson.JSONDecodeError as exc:
        error = str(exc)
    try:
        return json.loads(data, parse_constant=_NonFinite), error
    except (ValueError, RecursionError):
        raise DocumentInvalid([Issue("invalid-json", "", not_json(data) or error)]) from None


def _schema_version(tree: Any) -> Version:
    if not isinstance(tree, dict):
        raise DocumentInvalid([Issue("wrong-type", "", "a document is a JSON object")])
    if "schema_version" not in tree:
        raise DocumentInvalid(
            [Issue("missing-field", "/schema_version", "the document has no schema_version")]
        )
    raw = tree["schema_version"]
    if not isinstance(raw, dict):
        raise DocumentInvalid(
            [Issue("wrong-type", "/schema_version", "schema_version must be {major, minor}")]
        )
    parts = []
    for key in ("major", "minor"):
        value = raw.get(key)
        path = f"/schema_version/{key}"
        if key not in raw:
            raise DocumentInvalid([Issue("missing-field", path, f"schema_version has no {key}")])
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise DocumentInvalid(
                [Issue("wrong-type", path, f"{key} must be a non-negative integer")]
            )
        parts.append(value)
    return parts[0], parts[1]


def _read(data: bytes, version: Version, steps: list[str]) -> Upgraded:
    return _upgraded(read(data, ExportedProgram), version, steps)


def _upgraded(found: Read[ExportedProgram], version: Version, steps: list[str]) -> Upgraded:
    doc = found.document
    # Defaults a document of an older minor omits are steps of its upgrade; one at the current
    # version (or newer) that omits them is read as torch reads it, not upgraded, and finding
    # them takes a walk of the whole document (a third of semantic validation's time).
    filled = found.filled if version < CURRENT else ()
    steps = [*steps, *(_fill_step(path) for path in filled)]
    target = version if version[0] == CURRENT[0] and version > CURRENT else CURRENT
    if (doc.schema_version.major, doc.schema_version.minor) != target:
        doc.schema_version.major, doc.schema_version.minor = target
        steps.append(f"schema_version {format_version(version)} -> {format_version(target)}")
    return Upgraded(
        doc, format_version(version), format_version(target), steps, found.unknown_fields
    )


def _fill_step(path: str) -> str:
    struct, name = path.split(".")
    default = struct_defaults(STRUCTS[struct])[name]
    return f"filled {path} with {orjson.dumps(default).decode()}"


# ---------------------------------------------------------------- 7.x -> 8.x


def _upgrade_7x(tree: dict[str, Any]) -> list[str]:
    """Rewrite a 7.x tree in place into 8.x wire form; one step per kind of rewrite done.

    The walk follows the 8.2 description, whose shape 7.3 documents share except for the
    rewritten spots; SymExprHint's changed arm order needs nothing (a union is one key).
    """
    description = describe(FIRST_8X)
    notes: dict[str, None] = {}
    for place in places(tree, description, "ExportedProgram"):
        t, value = place.type, place.value
        if t.name == "float" and isinstance(value, _NonFinite):
            place.parent[place.key] = value.text
            notes["float: bare Infinity/-Infinity/NaN tokens -> torch's float strings"] = None
        elif t.name == "RangeConstraint" and isinstance(value, dict):
            _fix_range(value, notes)
        elif isinstance(value, dict) and len(value) == 1:
            spec = description.get(t.name)
            arm = next(iter(value))
            if isinstance(spec, dict) and spec["kind"] == "union" and arm in spec["fields"]:
                _fix_arm(t.name, arm, value, notes)
    return list(notes)


def _fix_arm(union: str, arm: str, value: dict[str, Any], notes: dict[str, None]) -> None:
    if union in _NONE_UNIONS and arm == "as_none" and value[arm] == []:
        value[arm] = True
        notes[f"{union}.as_none: [] -> true (Tuple[()] became bool in 8.2)"] = None
    if union == "InputSpec" and arm == "constant_input":
        notes[
            "InputSpec.constant_input: ConstantInputSpec read as InputToConstantInputSpec "
            "(same fields name, value)"
        ] = None


def _fix_range(value: dict[str, Any], notes: dict[str, None]) -> None:
    for bound in ("min_val", "max_val"):
        v = value.get(bound)
        if (
            (isinstance(v, _NonFinite) and v.text in _INFINITE)
            or (isinstance(v, str) and v in _INFINITE)
            or (isinstance(v, float) and math.isinf(v))
        ):
            value[bound] = None
            notes[
                f"RangeConstraint.{bound}: infinite bound -> null "
                "(unbounded; int became Optional[int] in 8.2)"
            ] = None


def _refuse_leftover_tokens(tree: Any) -> None:
    stack: list[tuple[Any, list[str | int]]] = [(tree, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _NonFinite):
            raise DocumentInvalid(
                [
                    Issue(
                        "wrong-type",
                        pointer(path),
                        f"bare {value.text} where the schema has no float",
                    )
                ]
            )
        if isinstance(value, dict):
            stack.extend((v, [*path, k]) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, [*path, i]) for i, v in enumerate(value))
