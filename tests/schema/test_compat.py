"""Which schema versions and torch releases read a document, from the features it uses."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
import yaml

import schema
from app.programs.validation import schema_floor
from schema.compat import (
    document_use,
    newest_used,
    present_keys,
    reader_policy,
    used_features,
)
from schema.jsonschema import description_json_schema
from tests.zoo import PROGRAM_NAMES

EIGHT_X = [v.version for v in schema.versions() if v.describable]


def _releases(since: tuple[int, int], keys: tuple[int, int] = (8, 2)) -> list[str]:
    """The 8.x releases at `since` or newer; those whose reader refuses unknown keys (up to 2.8)
    only at `keys` or newer, the newest version among the keys the document holds."""
    return [
        r
        for v, rs in sorted(schema.RELEASES.items())
        if v[0] == 8 and v >= since
        for r in rs
        if reader_policy(r) == "skip" or v >= keys
    ]


def _newest_key(raw: bytes) -> tuple[int, int]:
    return max(v for v in present_keys(schema.load(raw)).values() if v is not None)


@cache
def _strict_validator(version: tuple[int, int]) -> jsonschema.Draft202012Validator:
    """The JSON Schema of `version` with unknown struct keys refused (as a reader of it would
    not know them)."""
    js = description_json_schema(schema.describe(version), "ExportedProgram")
    for spec in js["$defs"].values():
        if "required" in spec:
            spec["additionalProperties"] = False
    return jsonschema.Draft202012Validator(js)


@cache
def _reader_validator(version: tuple[int, int]) -> jsonschema.Draft202012Validator:
    """The JSON Schema of `version` as it is: unknown struct keys allowed, unknown union arms
    and enum values refused, which is how torch's reader of that version treats them."""
    return jsonschema.Draft202012Validator(
        description_json_schema(schema.describe(version), "ExportedProgram")
    )


def _stripped(raw: bytes) -> Any:
    """The document with every field at its default left out."""
    doc = schema.load(raw, schema.ExportedProgram)
    return orjson.loads(doc.__pydantic_serializer__.to_json(doc, exclude_defaults=True))


def _oldest_accepting(raw: bytes) -> tuple[int, int]:
    """The oldest 8.x version whose strict JSON Schema accepts the document once every field
    at its default is left out; every newer version must accept it too."""
    stripped = _stripped(raw)
    accepted = [v for v in EIGHT_X if _strict_validator(v).is_valid(stripped)]
    assert accepted == EIGHT_X[EIGHT_X.index(accepted[0]) :]
    return accepted[0]


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_min_version_is_what_the_document_uses(name: str, zoo_json: dict[str, bytes]) -> None:
    c = schema.compat(zoo_json[name])
    expected = _oldest_accepting(zoo_json[name])
    assert c.min_version == schema.format_version(expected)
    newest = max(schema.parse_version(since) for _, since in c.features)
    assert schema.format_version(newest) == c.min_version
    assert c.readable_by == _releases(expected, _newest_key(zoo_json[name]))
    everyone = [r for _, rs in sorted(schema.RELEASES.items()) for r in rs]
    ignoring = [r for r, _ in c.read_ignoring]
    assert [r for r, _ in c.not_readable_by] == [
        r for r in everyone if r not in c.readable_by and r not in ignoring
    ]
    assert not set(ignoring) & set(c.readable_by)
    assert c == schema.compat(schema.load(zoo_json[name]))


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_releases_reading_while_ignoring_fields(name: str, zoo_json: dict[str, bytes]) -> None:
    c = schema.compat(zoo_json[name])
    stripped = _stripped(zoo_json[name])
    version_of = {r: v for v, rs in schema.RELEASES.items() for r in rs}
    for release, why in c.read_ignoring:
        # What that release's reader accepts, though not everything in it is known there.
        assert _reader_validator(version_of[release]).is_valid(stripped), release
        assert not _strict_validator(version_of[release]).is_valid(stripped), release
        assert why.startswith("reads it, ignoring "), why
    whole = orjson.loads(zoo_json[name])
    for release, why in c.not_readable_by:
        v = version_of[release]
        if v[0] != 8:
            continue
        if reader_policy(release) == "fatal":
            # torch writes every key, defaults too: a reader building `cls(**data)` meets them all
            assert not _strict_validator(v).is_valid(whole), release
            assert "reader refuses keys it does not know" in why, why
        else:
            assert not _reader_validator(v).is_valid(stripped), release


def test_releases_before_2_11_read_conv_ignoring_node_names(zoo_json: dict[str, bytes]) -> None:
    c = schema.compat(zoo_json["conv"])
    assert c.min_version == "8.17"
    assert ("Node.name", "8.17") in c.features
    assert c.readable_by == ["2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"]
    reasons = dict(c.not_readable_by)
    assert "2.10.0" not in reasons
    assert dict(c.read_ignoring)["2.10.0"] == (
        "reads it, ignoring Node.name (since 8.17), which schema 8.15 lacks: its value is lost"
    )
    assert [r for r, _ in c.read_ignoring] == ["2.9.0", "2.9.1", "2.10.0"]
    assert reasons["2.5.0"] == (
        "it writes schema 7.3 and refuses documents of another major (this one is 8.x)"
    )
    # torch 2.6 to 2.8 build each dataclass with cls(**data): a key they lack is a TypeError
    assert (
        "unknown key Node.name (since 8.17): torch 2.8.0's reader refuses keys it does not know"
        in (reasons["2.8.0"])
    )
    assert "unknown key NamedArgument.kind (since 8.7)" in reasons["2.6.0"]
    assert "NamedArgument.kind" not in reasons["2.7.0"]

    tree = orjson.loads(zoo_json["conv"])
    for node in tree["graph_module"]["graph"]["nodes"]:
        node["name"] = None
    unnamed = schema.compat(orjson.dumps(tree))
    assert unnamed.min_version == "8.7"
    assert "Node.name" not in dict(unnamed.features)
    # the key is still there (null): only the readers that skip unknown keys read past it
    assert unnamed.readable_by == _releases((8, 7), (8, 17))
    assert "2.9.0" in unnamed.readable_by
    assert "2.8.0" not in unnamed.readable_by


def test_float_lists_exclude_releases_before_2_12(zoo_json: dict[str, bytes]) -> None:
    tree = orjson.loads(zoo_json["conv"])
    tree["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"] = {
        "as_float_lists": [[1.0, 2.5], []]
    }
    c = schema.compat(orjson.dumps(tree))
    assert c.min_version == "8.20"
    assert c.features[-1] == ("Argument.as_float_lists", "8.20")
    assert c.readable_by == list(schema.RELEASES[(8, 20)])
    before = [r for v, rs in sorted(schema.RELEASES.items()) if v < (8, 20) for r in rs]
    assert [r for r, _ in c.not_readable_by] == before
    assert dict(c.not_readable_by)["2.11.0"] == (
        "schema 8.17 lacks Argument.as_float_lists (since 8.20; an unknown union arm: "
        "reading fails)"
    )
    assert _oldest_accepting(orjson.dumps(tree)) == (8, 20)


def test_new_enum_values_count(zoo_json: dict[str, bytes]) -> None:
    tree = orjson.loads(zoo_json["conv"])
    for node in tree["graph_module"]["graph"]["nodes"]:
        node["name"] = None
    first = next(iter(tree["graph_module"]["graph"]["tensor_values"].values()))
    first["dtype"] = schema.ScalarType.FLOAT8E4M3FNUZ.value
    c = schema.compat(orjson.dumps(tree))
    assert c.min_version == "8.14"
    assert ("ScalarType.FLOAT8E4M3FNUZ", "8.14") in c.features
    assert dict(c.not_readable_by)["2.8.0"].endswith(
        "schema 8.8 lacks ScalarType.FLOAT8E4M3FNUZ (since 8.14; an unknown enum value: "
        "reading fails)"
    )
    assert _oldest_accepting(orjson.dumps(tree)) == (8, 14)


def test_fields_at_their_default_do_not_count(zoo_json: dict[str, bytes]) -> None:
    tree: dict[str, Any] = orjson.loads(zoo_json["conv"])
    tree["guards_code"] = []
    tree["graph_module"]["treespec_namedtuple_fields"] = {}
    assert "ExportedProgram.guards_code" not in dict(schema.compat(orjson.dumps(tree)).features)
    tree["guards_code"] = ["x > 1"]
    assert ("ExportedProgram.guards_code", "8.14") in schema.compat(orjson.dumps(tree)).features


def test_compat_refuses_invalid_documents() -> None:
    with pytest.raises(schema.DocumentInvalid):
        schema.compat(b'{"schema_version": {"major": 8, "minor": 20}}')


# ---------------------------------------------------------------- the newest version used


def _yaml_default(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # torch writes a str field's default bare (`<=2.4`)


@cache
def _first_seen(history_dir: Path) -> dict[str, tuple[int, int]]:
    """Every ``Type.field``, ``Union.arm`` and ``Enum.VALUE`` of torch's schema.yaml files, with
    the oldest schema version whose file has it."""
    seen: dict[str, tuple[int, int]] = {}
    for path in history_dir.glob("torch-*.schema.yaml"):
        ref = yaml.safe_load(path.read_text())
        major, minor = ref["SCHEMA_VERSION"]
        version = (int(major), int(minor))
        for name, spec in ref.items():
            for field in spec["fields"] if isinstance(spec, dict) else ():
                key = f"{name}.{field}"
                seen[key] = min(seen.get(key, version), version)
    return seen


def _wire_features(types: dict[str, Any], type_: str, value: Any, found: set[str]) -> None:
    """The features a wire value uses, read off torch's description: struct fields present and
    not at their default, union arms, enum values."""
    if value is None or type_ in ("int", "float", "str", "bool"):
        return
    for wrapper in ("Optional[", "List["):
        if type_.startswith(wrapper):
            inner = type_[len(wrapper) : -1]
            for item in value if wrapper == "List[" else [value]:
                _wire_features(types, inner, item, found)
            return
    if type_.startswith("Dict[str, "):
        for item in value.values():
            _wire_features(types, type_[len("Dict[str, ") : -1], item, found)
        return
    spec = types[type_]
    if spec["kind"] == "enum":
        [member] = [k for k, v in spec["fields"].items() if v == value]
        found.add(f"{type_}.{member}")
        return
    for key, item in value.items():
        field = spec["fields"][key]
        if spec["kind"] == "struct" and "default" in field:
            if item == _yaml_default(field["default"]):
                continue
        found.add(f"{type_}.{key}")
        _wire_features(types, field["type"], item, found)


def _floor_cases(zoo_json: dict[str, bytes]) -> list[tuple[str, bytes]]:
    """The zoo, and variants of two programs reaching back to 8.2 features and up to 8.20's."""
    cases = [(name, zoo_json[name]) for name in PROGRAM_NAMES]
    for name in ("cond", "dynamic"):
        tree = orjson.loads(zoo_json[name])
        graph = tree["graph_module"]["graph"]
        for node in graph["nodes"]:
            node["name"] = None  # 8.17
        cases.append((f"{name}-unnamed", orjson.dumps(tree)))
        tree["guards_code"] = []  # 8.14
        cases.append((f"{name}-unguarded", orjson.dumps(tree)))
        for node in graph["nodes"]:
            for named in node["inputs"]:
                named["kind"] = None  # 8.7
        cases.append((f"{name}-bare", orjson.dumps(tree)))
        first = next(iter(graph["tensor_values"]))
        graph["tensor_values"][first]["dtype"] = schema.ScalarType.UINT64.value
        arg = {"as_float_lists": [[1.0, 2.5]]}
        graph["nodes"][0]["inputs"].append({"name": "extra", "arg": arg, "kind": 2})
        cases.append((f"{name}-newer", orjson.dumps(tree)))
    return cases


def test_newest_used_version_follows_torchs_history(
    zoo_json: dict[str, bytes], history_dir: Path
) -> None:
    installed = yaml.safe_load((history_dir / "torch-2.13.0.schema.yaml").read_text())
    assert tuple(installed["SCHEMA_VERSION"]) == schema.CURRENT
    seen = _first_seen(history_dir)
    floors = set()
    for name, raw in _floor_cases(zoo_json):
        doc = schema.load(raw, schema.ExportedProgram)
        wire: set[str] = set()
        _wire_features(installed, "ExportedProgram", orjson.loads(raw), wire)
        used = used_features(doc)
        assert set(used) == wire, name
        assert all(schema.parse_version(v) == seen[f] for f, v in schema.compat(doc).features)
        expected = max(seen[f] for f in wire)
        assert newest_used(doc) == expected, name
        assert schema_floor(doc) == max(expected, (8, 2)), name
        assert schema.compat(doc).min_version == schema.format_version(schema_floor(doc)), name
        floors.add(expected)
    # the cases reach from 8.2 documents to the newest features
    assert {(8, 7), (8, 14), (8, 17), (8, 20)} <= floors
    assert min(floors) <= (8, 2)


def _subgraph(tree: dict[str, Any]) -> dict[str, Any]:
    for node in tree["graph_module"]["graph"]["nodes"]:
        for named in node["inputs"]:
            if "as_graph" in named["arg"]:
                found: dict[str, Any] = named["arg"]["as_graph"]["graph"]
                return found
    raise AssertionError("cond has a subgraph")


@pytest.mark.parametrize(
    "newer",
    [
        pytest.param(
            lambda g: g["tensor_values"][next(iter(g["tensor_values"]))].update(
                dtype=schema.ScalarType.UINT32.value
            ),
            id="dtype",
        ),
        pytest.param(
            lambda g: g["nodes"][0]["inputs"].append(
                {
                    "name": "e",
                    "arg": {"as_scalar_type": schema.ScalarType.FLOAT8E8M0FNU.value},
                    "kind": 2,
                }
            ),
            id="enum-arm",
        ),
        pytest.param(
            lambda g: g["nodes"][0]["inputs"].append(
                {"name": "e", "arg": {"as_float_lists": [[1.0]]}, "kind": 2}
            ),
            id="arm",
        ),
    ],
)
def test_newest_used_finds_one_newer_feature_deep_in_a_subgraph(
    zoo_json: dict[str, bytes], newer: Any
) -> None:
    # the walk skips what cannot raise the newest version met so far: one 8.20 feature alone,
    # deep inside a subgraph of a document otherwise at 8.17, must still be found
    tree = orjson.loads(zoo_json["cond"])
    assert newest_used(schema.load(orjson.dumps(tree))) == (8, 17)
    newer(_subgraph(tree))
    doc = schema.load(orjson.dumps(tree))
    assert newest_used(doc) == max(u.since for u in used_features(doc).values()) == (8, 20)


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_document_use_is_the_full_walks_above_the_first_8x(
    name: str, zoo_json: dict[str, bytes]
) -> None:
    doc = schema.load(zoo_json[name])
    use = document_use(doc)
    assert use.used == {p: u for p, u in used_features(doc).items() if u.since > (8, 2)}
    assert use.present == {
        p: v for p, v in present_keys(doc).items() if v is not None and v > (8, 2)
    }
