"""Documents of other schema versions: older 8.x and 7.3 upgraded, newer 8.x kept, rest refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

import schema
from schema.description import field_wire
from tests.zoo import PROGRAM_NAMES

Version = tuple[int, int]
EIGHT_X = [v.version for v in schema.versions() if v.describable]


def _models(value: Any) -> Iterator[BaseModel]:
    if isinstance(value, BaseModel):
        yield value
        for name in type(value).model_fields:
            yield from _models(getattr(value, name))
    elif isinstance(value, list):
        for item in value:
            yield from _models(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _models(item)


def _newer_fields(doc: BaseModel, v: Version, force: bool) -> set[str]:
    """Unset every struct field the models date after `v` that is at its default (or that has a
    default, with `force`, which first puts it back to that default); return them."""
    dropped = set()
    for model in _models(doc):
        if not isinstance(model, schema.Struct):
            continue
        for name, info in type(model).model_fields.items():
            if field_wire(info).since <= v or info.is_required():
                continue
            default = info.get_default(call_default_factory=True)
            if force:
                setattr(model, name, default)
            if getattr(model, name) == default:
                model.model_fields_set.discard(name)
                dropped.add(f"{type(model).__name__}.{name}")
    return dropped


def _unset_json(doc: BaseModel) -> Any:
    return orjson.loads(doc.__pydantic_serializer__.to_json(doc, exclude_unset=True))


def _older_form(raw: bytes, v: Version) -> tuple[bytes, set[str]]:
    """The document as a writer of `v` would have written it: fields newer than `v` left out
    where they are at their default."""
    doc = schema.load(raw, schema.ExportedProgram)
    dropped = _newer_fields(doc, v, force=False)
    tree = _unset_json(doc)
    tree["schema_version"] = {"major": v[0], "minor": v[1]}
    return orjson.dumps(tree), dropped


def _filled(steps: list[str]) -> set[str]:
    return {s.split()[1] for s in steps if s.startswith("filled ")}


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_older_8x_forms_upgrade_back(name: str, zoo_json: dict[str, bytes]) -> None:
    original = orjson.loads(zoo_json[name])
    every: set[str] = set()
    for v in EIGHT_X:
        older, dropped = _older_form(zoo_json[name], v)
        u = schema.upgrade(older)
        assert orjson.loads(schema.dump(u.document)) == original, v
        assert (u.from_version, u.to_version) == (schema.format_version(v), "8.20")
        assert _filled(u.steps) == dropped, v
        bump = [] if v == (8, 20) else [f"schema_version {schema.format_version(v)} -> 8.20"]
        assert u.steps == [s for s in u.steps if s.startswith("filled ")] + bump
        assert u.unknown_fields == []
        every |= dropped
    assert every


def test_older_form_steps_exactly(zoo_json: dict[str, bytes]) -> None:
    older, dropped = _older_form(zoo_json["conv"], (8, 7))
    assert dropped == {"ExportedProgram.guards_code"}
    assert "guards_code" not in orjson.loads(older)
    assert schema.upgrade(older).steps == [
        "filled ExportedProgram.guards_code with []",
        "schema_version 8.7 -> 8.20",
    ]
    older, dropped = _older_form(zoo_json["conv"], (8, 2))
    assert dropped == {
        "ExportedProgram.guards_code",
        "GraphModule.treespec_namedtuple_fields",
        "Node.is_hop_single_tensor_return",
    }
    assert schema.upgrade(older).steps == [
        "filled ExportedProgram.guards_code with []",
        "filled GraphModule.treespec_namedtuple_fields with {}",
        "filled Node.is_hop_single_tensor_return with null",
        "schema_version 8.2 -> 8.20",
    ]


def test_current_documents_pass_unchanged(zoo_json: dict[str, bytes]) -> None:
    for name in PROGRAM_NAMES:
        u = schema.upgrade(zoo_json[name])
        assert (u.from_version, u.to_version, u.steps, u.unknown_fields) == (
            "8.20",
            "8.20",
            [],
            [],
        )
        assert orjson.loads(schema.dump(u.document)) == orjson.loads(zoo_json[name])


def test_a_current_document_omitting_defaults_is_not_upgraded(zoo_json: dict[str, bytes]) -> None:
    tree = orjson.loads(zoo_json["conv"])
    del tree["guards_code"]
    u = schema.upgrade(orjson.dumps(tree))
    assert (u.from_version, u.to_version, u.steps) == ("8.20", "8.20", [])
    assert u.document.guards_code == []
    tree["schema_version"] = {"major": 8, "minor": 19}
    assert schema.upgrade(orjson.dumps(tree)).steps == [
        "filled ExportedProgram.guards_code with []",
        "schema_version 8.19 -> 8.20",
    ]


# ---------------------------------------------------------------- 7.3


def _to_7_3(value: Any) -> Any:
    """torch 2.5's wire form: ``as_none`` is ``[]``, non-finite floats are bare JSON tokens."""
    if isinstance(value, dict):
        if value == {"as_none": True}:
            return {"as_none": []}
        return {k: _to_7_3(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_7_3(v) for v in value]
    if value in ("Infinity", "-Infinity", "NaN"):
        return float(value)
    return value


def test_7_3_document_upgrades(zoo_json: dict[str, bytes]) -> None:
    tree = orjson.loads(zoo_json["scalar_floats"])
    # 7.3-era features the zoo program lacks
    tree["graph_module"]["signature"]["input_specs"].append(
        {"constant_input": {"name": "c", "value": {"as_none": True}}}
    )
    tree["graph_module"]["graph"]["nodes"][0]["inputs"].append(
        {
            "name": "opt",
            "arg": {"as_optional_tensors": [{"as_none": True}, {"as_tensor": {"name": "x"}}]},
            "kind": None,
        }
    )
    tree["range_constraints"]["s0"] = {"min_val": 2, "max_val": None}
    doc = schema.load(orjson.dumps(tree), schema.ExportedProgram)
    dropped = _newer_fields(doc, (7, 3), force=True)
    expected = orjson.loads(schema.dump(doc))
    # what remains is expressible in 7.3, where InputToConstantInputSpec was ConstantInputSpec
    newer = [f for f, since in schema.compat(doc).features if since not in ("5.1", "5.3", "7.3")]
    assert newer == ["InputToConstantInputSpec.name", "InputToConstantInputSpec.value"]

    old = _to_7_3(_unset_json(doc))
    old["schema_version"] = {"major": 7, "minor": 3}
    old["range_constraints"]["s0"]["max_val"] = float("inf")
    raw = json.dumps(old).encode()
    assert b'"max_val": Infinity' in raw
    assert b'"as_none": []' in raw
    assert b"-Infinity" in raw
    assert b'"-Infinity"' not in raw

    u = schema.upgrade(raw)
    assert orjson.loads(schema.dump(u.document)) == expected
    assert (u.from_version, u.to_version, u.unknown_fields) == ("7.3", "8.20", [])
    assert _filled(u.steps) == dropped
    assert "Node.name" in dropped
    assert [s for s in u.steps if not s.startswith("filled ")] == [
        "OptionalTensorArgument.as_none: [] -> true (Tuple[()] became bool in 8.2)",
        "float: bare Infinity/-Infinity/NaN tokens -> torch's float strings",
        "Argument.as_none: [] -> true (Tuple[()] became bool in 8.2)",
        "InputSpec.constant_input: ConstantInputSpec read as InputToConstantInputSpec "
        "(same fields name, value)",
        "ConstantValue.as_none: [] -> true (Tuple[()] became bool in 8.2)",
        "RangeConstraint.max_val: infinite bound -> null (unbounded; int became Optional[int] "
        "in 8.2)",
        "schema_version 7.3 -> 8.20",
    ]


def test_7_x_bare_token_outside_a_float(zoo_json: dict[str, bytes]) -> None:
    tree = orjson.loads(zoo_json["conv"])
    tree["schema_version"] = {"major": 7, "minor": 3}
    tree["opset_version"]["aten"] = float("nan")
    with pytest.raises(schema.DocumentInvalid) as info:
        schema.upgrade(json.dumps(tree))
    assert info.value.issues == [
        schema.Issue("wrong-type", "/opset_version/aten", "bare NaN where the schema has no float")
    ]


def test_8_x_bare_tokens_are_invalid_json(zoo_json: dict[str, bytes]) -> None:
    tree = orjson.loads(zoo_json["scalar_floats"])
    raw = json.dumps(_to_7_3(tree)).encode()
    with pytest.raises(schema.DocumentInvalid) as info:
        schema.upgrade(raw)
    [issue] = info.value.issues
    assert (issue.code, issue.path) == ("invalid-json", "")


# ---------------------------------------------------------------- other versions


@pytest.mark.parametrize("version", [(9, 0), (5, 3), (0, 0)])
def test_other_majors_refused(version: Version, zoo_json: dict[str, bytes]) -> None:
    tree = orjson.loads(zoo_json["conv"])
    tree["schema_version"] = {"major": version[0], "minor": version[1]}
    with pytest.raises(schema.UnsupportedMajor) as info:
        schema.upgrade(orjson.dumps(tree))
    assert str(info.value) == (
        f"schema version {schema.format_version(version)} is not supported; supported: 8.x (up "
        "to 8.20 upgraded, newer 8.x read with their unknown fields kept) and 7.x (upgraded to "
        "8.20)"
    )
    assert info.value.code == "unsupported-schema-major"


def test_newer_minor_kept_with_unknown_fields(zoo_json: dict[str, bytes]) -> None:
    tree = orjson.loads(zoo_json["dynamic"])
    tree["schema_version"] = {"major": 8, "minor": 99}
    tree["future_field"] = {"nested": [1, 2]}
    tree["graph_module"]["graph"]["nodes"][0]["future_flag"] = True
    u = schema.upgrade(orjson.dumps(tree))
    assert (u.from_version, u.to_version, u.steps) == ("8.99", "8.99", [])
    assert u.unknown_fields == ["/graph_module/graph/nodes/0/future_flag", "/future_field"]
    assert orjson.loads(schema.dump(u.document)) == tree


@pytest.mark.parametrize(
    ("raw", "issue"),
    [
        (b"[1]", schema.Issue("wrong-type", "", "a document is a JSON object")),
        (
            b"{}",
            schema.Issue("missing-field", "/schema_version", "the document has no schema_version"),
        ),
        (
            b'{"schema_version": 8}',
            schema.Issue("wrong-type", "/schema_version", "schema_version must be {major, minor}"),
        ),
        (
            b'{"schema_version": {"major": "8", "minor": 1}}',
            schema.Issue(
                "wrong-type", "/schema_version/major", "major must be a non-negative integer"
            ),
        ),
        (
            b'{"schema_version": {"major": 8, "minor": true}}',
            schema.Issue(
                "wrong-type", "/schema_version/minor", "minor must be a non-negative integer"
            ),
        ),
        (
            b'{"schema_version": {"major": 8}}',
            schema.Issue("missing-field", "/schema_version/minor", "schema_version has no minor"),
        ),
    ],
)
def test_unreadable_versions(raw: bytes, issue: schema.Issue) -> None:
    with pytest.raises(schema.DocumentInvalid) as info:
        schema.upgrade(raw)
    assert info.value.issues == [issue]


def test_invalid_json() -> None:
    with pytest.raises(schema.DocumentInvalid) as info:
        schema.upgrade(b'{"schema_version": ')
    assert [i.code for i in info.value.issues] == ["invalid-json"]


def test_older_document_still_validated(zoo_json: dict[str, bytes]) -> None:
    tree = orjson.loads(zoo_json["conv"])
    tree["schema_version"] = {"major": 8, "minor": 7}
    tree["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"] = {"as_tensor": 3}
    with pytest.raises(schema.DocumentInvalid) as info:
        schema.upgrade(orjson.dumps(tree))
    assert [(i.code, i.path) for i in info.value.issues] == [
        ("wrong-type", "/graph_module/graph/nodes/0/inputs/0/arg/as_tensor")
    ]
