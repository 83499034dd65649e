"""JSON Schema (draft 2020-12) of documents of any described version."""

from __future__ import annotations

from typing import Any

from schema._base import Version
from schema.description import Description, TypeExpr, describe, parse_type
from schema.errors import DescriptionInvalid

_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_NONFINITE = ["Infinity", "-Infinity", "NaN"]


def json_schema(
    version: str | Version, root: str = "ExportedProgram", refs: str = "#/$defs/"
) -> dict[str, Any]:
    """The JSON Schema of `root` documents of a known 8.x version (types referenced as
    `refs` + name: an OpenAPI document passes ``#/components/schemas/``)."""
    return description_json_schema(describe(version), root, refs)


def description_json_schema(
    description: Description, root: str, refs: str = "#/$defs/"
) -> dict[str, Any]:
    """The JSON Schema of `root` documents under any description."""
    types = {k: v for k, v in description.items() if isinstance(v, dict) and "kind" in v}
    if root not in types:
        raise DescriptionInvalid(f"the description has no type {root!r}")
    defs = {name: _type_def(name, spec, types, refs) for name, spec in types.items()}
    return {
        "$schema": _DIALECT,
        "title": f"{root} (schema {description.get('SCHEMA_VERSION')})",
        "$ref": f"{refs}{root}",
        "$defs": defs,
    }


def _type_def(name: str, spec: dict[str, Any], types: dict[str, Any], refs: str) -> dict[str, Any]:
    fields: dict[str, Any] = spec.get("fields") or {}
    kind = spec.get("kind")
    if kind == "enum":
        return {"title": name, "type": "integer", "enum": sorted(set(fields.values()))}
    props = {f: _expr(parse_type(d["type"]), types, refs) for f, d in fields.items()}
    if kind == "struct":
        return {
            "title": name,
            "type": "object",
            "properties": props,
            "required": [f for f, d in fields.items() if "default" not in d],
        }
    if kind == "union":
        return {
            "title": name,
            "type": "object",
            "properties": props,
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
        }
    raise DescriptionInvalid(f"type {name!r} has an unknown kind {kind!r}")


def _expr(t: TypeExpr, types: dict[str, Any], refs: str) -> dict[str, Any]:
    if t.name == "int":
        return {"type": "integer"}
    if t.name == "str":
        return {"type": "string"}
    if t.name == "bool":
        return {"type": "boolean"}
    if t.name == "float":
        return {"anyOf": [{"type": "number"}, {"enum": _NONFINITE}]}
    if t.name == "List" and len(t.args) == 1:
        return {"type": "array", "items": _expr(t.args[0], types, refs)}
    if t.name == "Dict" and len(t.args) == 2:
        return {"type": "object", "additionalProperties": _expr(t.args[1], types, refs)}
    if t.name == "Optional" and len(t.args) == 1:
        return {"anyOf": [_expr(t.args[0], types, refs), {"type": "null"}]}
    if not t.args and t.name in types:
        return {"$ref": f"{refs}{t.name}"}
    raise DescriptionInvalid(f"unknown type {t}")
