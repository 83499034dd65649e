"""Single mutations of a real document: each refused with its exact code and path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jsonschema
import orjson
import pytest

import schema

Doc = dict[str, Any]
G = "/graph_module/graph"


def _meta(d: Doc) -> Doc:
    return next(iter(d["graph_module"]["graph"]["tensor_values"].values()))


def _meta_name(d: Doc) -> str:
    return next(iter(d["graph_module"]["graph"]["tensor_values"]))


def _node(d: Doc) -> Doc:
    return d["graph_module"]["graph"]["nodes"][0]


def _set(path: Callable[[Doc], Doc], key: str | int, value: Any) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        path(d)[key] = value  # type: ignore[index]

    return mutate


def _delete(path: Callable[[Doc], Doc], key: str) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        del path(d)[key]

    return mutate


def _graph(d: Doc) -> Doc:
    return d["graph_module"]["graph"]


def _inputs(d: Doc) -> Any:
    return d["graph_module"]["graph"]["inputs"]


def _specs(d: Doc) -> Any:
    return d["graph_module"]["signature"]["input_specs"]


def _out_specs(d: Doc) -> Any:
    return d["graph_module"]["signature"]["output_specs"]


def _sizes(d: Doc) -> Any:
    return _meta(d)["sizes"]


def _named(d: Doc) -> Doc:
    return _node(d)["inputs"][0]


# (id, mutation, expected [(code, path)]) ; paths that need the document use "{meta}"
CASES: list[tuple[str, Callable[[Doc], None], list[tuple[str, str]]]] = [
    (
        "unknown-arm",
        _set(_inputs, 0, {"as_tensr": {"name": "x"}}),
        [("union-unknown-arm", f"{G}/inputs/0")],
    ),
    (
        "two-arms",
        _set(_inputs, 0, {"as_tensor": {"name": "x"}, "as_int": 1}),
        [("union-many-arms", f"{G}/inputs/0")],
    ),
    ("no-arm", _set(_inputs, 0, {}), [("union-no-arm", f"{G}/inputs/0")]),
    ("union-not-object", _set(_inputs, 0, "x"), [("wrong-type", f"{G}/inputs/0")]),
    (
        "dtype-999",
        _set(_meta, "dtype", 999),
        [("unknown-enum-value", f"{G}/tensor_values/{{meta}}/dtype")],
    ),
    (
        "layout-99",
        _set(_meta, "layout", 99),
        [("unknown-enum-value", f"{G}/tensor_values/{{meta}}/layout")],
    ),
    (
        "sizes-string",
        _set(_meta, "sizes", "x"),
        [("wrong-type", f"{G}/tensor_values/{{meta}}/sizes")],
    ),
    (
        "missing-requires-grad",
        _delete(_meta, "requires_grad"),
        [("missing-field", f"{G}/tensor_values/{{meta}}/requires_grad")],
    ),
    (
        "missing-graph-module",
        _delete(lambda d: d, "graph_module"),
        [("missing-field", "/graph_module")],
    ),
    ("target-int", _set(_node, "target", 5), [("wrong-type", f"{G}/nodes/0/target")]),
    (
        "major-bool",
        _set(lambda d: d["schema_version"], "major", True),
        [("wrong-type", "/schema_version/major")],
    ),
    (
        "opset-string",
        _set(lambda d: d["opset_version"], "aten", "1"),
        [("wrong-type", "/opset_version/aten")],
    ),
    (
        "size-float",
        _set(_sizes, 0, {"as_int": 2.5}),
        [("wrong-type", f"{G}/tensor_values/{{meta}}/sizes/0/as_int")],
    ),
    (
        "size-arm",
        _set(_sizes, 0, {"as_in": 2}),
        [("union-unknown-arm", f"{G}/tensor_values/{{meta}}/sizes/0")],
    ),
    (
        "input-spec-arm",
        _set(_specs, 0, {"paramter": {}}),
        [("union-unknown-arm", "/graph_module/signature/input_specs/0")],
    ),
    (
        "output-spec-two",
        _set(_out_specs, 0, {"user_output": {"arg": {"as_none": True}}, "token": {}}),
        [("union-many-arms", "/graph_module/signature/output_specs/0")],
    ),
    (
        "metadata-int",
        _set(_node, "metadata", {"stack_trace": 1}),
        [("wrong-type", f"{G}/nodes/0/metadata/stack_trace")],
    ),
    (
        "float-string",
        _set(_named, "arg", {"as_float": "abc"}),
        [("wrong-type", f"{G}/nodes/0/inputs/0/arg/as_float")],
    ),
    (
        "float-bool",
        _set(_named, "arg", {"as_floats": [1.0, True]}),
        [("wrong-type", f"{G}/nodes/0/inputs/0/arg/as_floats/1")],
    ),
    ("kind-7", _set(_named, "kind", 7), [("unknown-enum-value", f"{G}/nodes/0/inputs/0/kind")]),
    ("nodes-object", _set(_graph, "nodes", {}), [("wrong-type", f"{G}/nodes")]),
    (
        "device-index-string",
        _set(lambda d: _meta(d)["device"], "index", "0"),
        [("wrong-type", f"{G}/tensor_values/{{meta}}/device/index")],
    ),
    (
        "range-string",
        _set(lambda d: next(iter(d["range_constraints"].values())), "min_val", "0"),
        [("wrong-type", "/range_constraints/{range}/min_val")],
    ),
    (
        "nested-arm-in-arm",
        _set(_named, "arg", {"as_sym_int": {"as_nme": "s0"}}),
        [("union-unknown-arm", f"{G}/nodes/0/inputs/0/arg/as_sym_int")],
    ),
    (
        "two-problems",
        lambda d: (_set(_meta, "dtype", 999)(d), _delete(_node, "target")(d)),
        [
            ("missing-field", f"{G}/nodes/0/target"),
            ("unknown-enum-value", f"{G}/tensor_values/{{meta}}/dtype"),
        ],
    ),
]


@pytest.fixture(scope="module")
def base(zoo_json: dict[str, bytes]) -> bytes:
    return zoo_json["dynamic"]


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    spec = schema.json_schema("8.20")
    jsonschema.Draft202012Validator.check_schema(spec)
    return jsonschema.Draft202012Validator(spec)


def _expected(doc: Doc, issues: list[tuple[str, str]]) -> list[tuple[str, str]]:
    fill = {"meta": _meta_name(doc), "range": next(iter(doc["range_constraints"]), "")}
    return sorted((code, path.format(**fill)) for code, path in issues)


@pytest.mark.parametrize(("case", "mutate", "issues"), CASES, ids=[c[0] for c in CASES])
def test_mutation_refused_with_path(
    case: str,
    mutate: Callable[[Doc], None],
    issues: list[tuple[str, str]],
    base: bytes,
    validator: jsonschema.Draft202012Validator,
) -> None:
    doc = orjson.loads(base)
    mutate(doc)
    with pytest.raises(schema.DocumentInvalid) as info:
        schema.load(orjson.dumps(doc))
    got = sorted((i.code, i.path) for i in info.value.issues)
    assert got == _expected(orjson.loads(base), issues)
    assert all(i.message for i in info.value.issues)
    assert not validator.is_valid(doc), "the JSON Schema accepts a document the models refuse"


def test_union_messages_name_the_arms(base: bytes) -> None:
    doc = orjson.loads(base)
    _inputs(doc)[0] = {"as_tensr": {"name": "x"}}
    with pytest.raises(schema.DocumentInvalid) as info:
        schema.load(orjson.dumps(doc))
    [issue] = info.value.issues
    assert "'as_tensr' is not an arm of Argument" in issue.message
    assert "as_tensor" in issue.message
    assert "as_float_lists" in issue.message


@pytest.mark.parametrize(
    ("raw", "code"),
    [(b'{"graph_module": ', "invalid-json"), (b"[1, 2]", "wrong-type"), (b"", "invalid-json")],
)
def test_unreadable_documents(raw: bytes, code: str) -> None:
    with pytest.raises(schema.DocumentInvalid) as info:
        schema.load(raw)
    assert [(i.code, i.path) for i in info.value.issues] == [(code, "")]


def test_json_schema_accepts_every_zoo_document(
    zoo_json: dict[str, bytes], validator: jsonschema.Draft202012Validator
) -> None:
    for name, raw in zoo_json.items():
        errors = [e.message for e in validator.iter_errors(orjson.loads(raw))]
        assert errors == [], name


@pytest.mark.parametrize("version", ["8.2", "8.7", "8.8", "8.14", "8.15", "8.17", "8.20"])
def test_json_schema_of_each_version_is_valid(version: str) -> None:
    spec = schema.json_schema(version)
    jsonschema.Draft202012Validator.check_schema(spec)
    arms = spec["$defs"]["Argument"]["properties"]
    assert ("as_float_lists" in arms) == (version == "8.20")
    assert ("as_optional_tensor" in arms) == (version not in ("8.2", "8.7"))
