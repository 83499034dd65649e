"""Levels schema and semantic on real zoo documents, clean and broken one rule at a time."""

from __future__ import annotations

import dataclasses
import io
import time
import zipfile
from collections.abc import Callable
from typing import Any

import orjson
import pytest

import schema
from app.programs.semantics import unused_ranges
from app.programs.validation import (
    Report,
    check_bounds,
    schema_floor,
    validate_bytes,
    validate_document,
)
from app.settings import Limits
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes

SETTINGS = Limits()
Mutation = Callable[[dict[str, Any]], None]


def _raw(zoo_json: dict[str, bytes], name: str, mutate: Mutation | None = None) -> bytes:
    doc = orjson.loads(zoo_json[name])
    if mutate is not None:
        mutate(doc)
    return orjson.dumps(doc)


def _doc(zoo_json: dict[str, bytes], name: str, mutate: Mutation | None = None) -> Any:
    return schema.load(_raw(zoo_json, name, mutate), schema.ExportedProgram)


def _errors(report: Report) -> list[tuple[str, str]]:
    return [(f.code, f.path) for f in report.findings if f.severity == "error"]


def _graph(doc: dict[str, Any]) -> dict[str, Any]:
    graph: dict[str, Any] = doc["graph_module"]["graph"]
    return graph


def _archive_tensors(ep: Any) -> dict[str, schema.TensorMeta]:
    """The tensor metas torch.export.save wrote into the archive's weight and constant configs."""
    found: dict[str, schema.TensorMeta] = {}
    with zipfile.ZipFile(io.BytesIO(archive_bytes(ep))) as archive:
        for member in archive.namelist():
            if member.endswith("_config.json"):
                config = schema.load(archive.read(member), schema.PayloadConfig)
                for fqn, payload in config.config.items():
                    assert payload.tensor_meta is not None
                    found[fqn] = payload.tensor_meta
    return found


# ---------------------------------------------------------------- clean documents


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_every_zoo_program_is_clean_at_level_semantic(
    zoo_json: dict[str, bytes], name: str
) -> None:
    report, doc = validate_bytes(zoo_json[name], "semantic", SETTINGS)
    assert doc is not None
    assert [f for f in report.findings if f.severity != "info"] == []
    assert report.valid
    assert report.unknown_fields == []
    assert report.unchecked == ["weights", "torch"]
    assert report.namespaces_to_register == (["pt2zoo"] if name == "custom_op" else [])


@pytest.mark.parametrize("name", ["linear_bn_train", "constants", "dtypes", "cond"])
def test_archive_weights_match_the_signature(
    zoo: dict[str, ZooProgram], zoo_json: dict[str, bytes], name: str
) -> None:
    tensors = _archive_tensors(zoo[name].ep)
    assert tensors
    report = validate_document(_doc(zoo_json, name), "semantic", SETTINGS, tensors)
    assert report.findings == []
    assert report.unchecked == ["torch"]


def test_level_schema_reports_unknown_fields_only(zoo_json: dict[str, bytes]) -> None:
    def mutate(doc: dict[str, Any]) -> None:
        _graph(doc)["nodes"][1]["future_field"] = {"x": 1}
        doc["opset_version"] = {}

    report, doc = validate_bytes(_raw(zoo_json, "conv", mutate), "schema", SETTINGS)
    assert doc is not None
    path = "/graph_module/graph/nodes/1/future_field"
    assert [(f.code, f.severity, f.path) for f in report.findings] == [
        ("unknown-field", "warning", path)
    ]
    assert report.valid
    assert report.unknown_fields == [path]
    assert report.unchecked == ["semantic", "safety", "weights", "torch"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda d: d["graph_module"].pop("signature"),
            [("missing-field", "/graph_module/signature")],
        ),
        (
            lambda d: d["graph_module"]["graph"]["nodes"][0]["inputs"][0].update(arg={"as_wat": 1}),
            [("union-unknown-arm", "/graph_module/graph/nodes/0/inputs/0/arg")],
        ),
        (
            lambda d: d["graph_module"]["graph"]["tensor_values"]["x"].update(dtype=999),
            [("unknown-enum-value", "/graph_module/graph/tensor_values/x/dtype")],
        ),
        (
            lambda d: d["graph_module"]["graph"]["tensor_values"]["x"].update(sizes="x"),
            [("wrong-type", "/graph_module/graph/tensor_values/x/sizes")],
        ),
    ],
)
def test_schema_errors_become_findings(
    zoo_json: dict[str, bytes], mutate: Mutation, expected: list[tuple[str, str]]
) -> None:
    report, doc = validate_bytes(_raw(zoo_json, "conv", mutate), "semantic", SETTINGS)
    assert doc is None
    assert not report.valid
    assert _errors(report) == expected
    assert report.unchecked == ["semantic", "safety", "weights", "torch"]


def test_invalid_json() -> None:
    report, doc = validate_bytes(b'{"graph_module": ', "schema", SETTINGS)
    assert doc is None
    assert _errors(report) == [("invalid-json", "")]


# ---------------------------------------------------------------- bounds


def _limited(**limits: Any) -> Limits:
    return dataclasses.replace(SETTINGS, **limits)


def test_bounds_of_a_real_document(zoo_json: dict[str, bytes]) -> None:
    data = zoo_json["cond"]
    assert check_bounds(data, SETTINGS) == []
    cases = {
        "document-too-large": _limited(max_json_bytes=len(data) - 1),
        "document-too-deep": _limited(max_json_depth=15),
        "document-string-too-long": _limited(max_string_length=200),
        "document-too-many-nodes": _limited(max_nodes=6),
    }
    for code, settings in cases.items():
        report, doc = validate_bytes(data, "semantic", settings)
        assert (_errors(report), doc) == ([(code, "")], None), code
    # the cond program has 3 nodes outside and 2 in each branch: 7 in all
    assert check_bounds(data, _limited(max_nodes=7)) == []
    # 16 levels, the deepest being a branch's node argument: document, graph_module, graph,
    # nodes, node, inputs, input, arg, as_graph, graph, nodes, node, inputs, input, arg, as_tensor
    assert check_bounds(data, _limited(max_json_depth=16)) == []


def test_a_hundred_thousand_brackets_are_refused_fast() -> None:
    data = b"[" * 100_000 + b"]" * 100_000
    start = time.perf_counter()
    report, doc = validate_bytes(data, "semantic", SETTINGS)
    assert time.perf_counter() - start < 1.0
    assert (_errors(report), doc) == ([("document-too-deep", "")], None)


def test_brackets_and_quotes_inside_strings_do_not_count(zoo_json: dict[str, bytes]) -> None:
    def mutate(doc: dict[str, Any]) -> None:
        _graph(doc)["nodes"][0]["metadata"]["note"] = '[[[[{{{{ \\" "target": ' * 50

    data = _raw(zoo_json, "conv", mutate)
    assert check_bounds(data, _limited(max_json_depth=10, max_nodes=5)) == []


@pytest.mark.parametrize(
    ("data", "longest"),
    [
        (b'{"abcd": "\\\\\\"xyz\\n"}', 5),  # escaped backslash and quote count 0, \n counts 2
        (b'["a", "bcdefg', 6),  # an unterminated string runs to the end
        (b'{"": [1]}', 0),
    ],
)
def test_string_lengths_count_escaped_quotes_and_backslashes_as_nothing(
    data: bytes, longest: int
) -> None:
    assert check_bounds(data, _limited(max_string_length=longest)) == []
    too_long = check_bounds(data, _limited(max_string_length=longest - 1))
    assert [(f.code, f.message) for f in too_long] == [
        (
            "document-string-too-long",
            f"a string of {longest} bytes; the limit is {longest - 1}",
        )
    ]


def test_digits_on_both_sides_of_a_string_make_one_number() -> None:
    data = b"[" + b"1" * 3000 + b'"x"' + b"2" * 1400 + b"]"
    assert [f.code for f in check_bounds(data, SETTINGS)] == ["document-number-too-long"]
    assert check_bounds(data.replace(b'"x"', b',"x",'), SETTINGS) == []


def test_an_overlong_number_is_refused(zoo_json: dict[str, bytes]) -> None:
    data = zoo_json["conv"].replace(b'"as_int": 1}', b'"as_int": 1' + b"0" * 4400 + b"}", 1)
    report, doc = validate_bytes(data, "schema", SETTINGS)
    assert (_errors(report), doc) == ([("document-number-too-long", "")], None)


# ---------------------------------------------------------------- semantic rules


def _set_input(node: int, index: int, name: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        _graph(doc)["nodes"][node]["inputs"][index]["arg"] = {"as_tensor": {"name": name}}

    return mutate


def _rename_output(node: int, index: int, name: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        _graph(doc)["nodes"][node]["outputs"][index] = {"as_tensor": {"name": name}}

    return mutate


def _drop(*keys: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        target = doc
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return mutate


def _swap_input_specs(doc: dict[str, Any]) -> None:
    specs = doc["graph_module"]["signature"]["input_specs"]
    specs[0], specs[1] = specs[1], specs[0]


def _outer_name_in_branch(doc: dict[str, Any]) -> None:
    branch = _graph(doc)["nodes"][2]["inputs"][1]["arg"]["as_graph"]["graph"]
    branch["nodes"][0]["inputs"][0]["arg"] = {"as_tensor": {"name": "sum_1"}}


NODES = "/graph_module/graph/nodes"
SEMANTIC_CASES: list[tuple[str, str, Mutation, list[tuple[str, str]]]] = [
    (
        "undefined",
        "conv",
        _set_input(1, 0, "ghost"),
        [("name-undefined", f"{NODES}/1/inputs/0/arg/as_tensor/name")],
    ),
    (
        "used before definition",
        "conv",
        _set_input(1, 0, "flatten"),
        [("name-used-before-definition", f"{NODES}/1/inputs/0/arg/as_tensor/name")],
    ),
    (
        "redefined",
        "linear_bn_train",
        # the second output of batch norm is unused, so renaming it breaks nothing else
        _rename_output(2, 1, "linear"),
        [("name-redefined", f"{NODES}/2/outputs/1/as_tensor/name")],
    ),
    (
        "subgraphs have their own scope",
        "cond",
        _outer_name_in_branch,
        [
            (
                "name-undefined",
                f"{NODES}/2/inputs/1/arg/as_graph/graph/nodes/0/inputs/0/arg/as_tensor/name",
            )
        ],
    ),
    (
        "tensor meta",
        "conv",
        _drop("graph_module", "graph", "tensor_values", "relu"),
        [("tensor-meta-missing", f"{NODES}/1/outputs/0/as_tensor/name")],
    ),
    (
        "sym int meta",
        "symint_out",
        _drop("graph_module", "graph", "sym_int_values", "mul"),
        [("sym-meta-missing", f"{NODES}/2/outputs/0/as_sym_int/as_name")],
    ),
    (
        "input specs",
        "conv",
        _swap_input_specs,
        [
            ("signature-input-mismatch", "/graph_module/signature/input_specs/0"),
            ("signature-input-mismatch", "/graph_module/signature/input_specs/1"),
        ],
    ),
    (
        "an input without a spec",
        "conv",
        lambda d: d["graph_module"]["signature"]["input_specs"].pop(),
        [("signature-input-mismatch", "/graph_module/graph/inputs/4")],
    ),
    (
        "output specs",
        "multi_out",
        lambda d: d["graph_module"]["signature"]["output_specs"][1]["user_output"].update(
            arg={"as_tensor": {"name": "mul"}}
        ),
        [("signature-output-mismatch", "/graph_module/signature/output_specs/1")],
    ),
    (
        "a mutation spec without its output",
        "linear_bn_train",
        lambda d: d["graph_module"]["signature"]["output_specs"].append(
            {"buffer_mutation": {"arg": {"name": "add"}, "buffer_name": "bn.running_var"}}
        ),
        [("signature-output-mismatch", "/graph_module/signature/output_specs/4")],
    ),
    (
        "empty range",
        "dynamic",
        lambda d: d["range_constraints"]["s17"].update(min_val=65),
        [("range-empty", "/range_constraints/s17")],
    ),
    (
        "call graph root",
        "preserve_sig",
        lambda d: d["graph_module"]["module_call_graph"].reverse(),
        [("module-call-graph-invalid", "/graph_module/module_call_graph/0/fqn")],
    ),
    (
        "call graph duplicate",
        "preserve_sig",
        lambda d: d["graph_module"]["module_call_graph"][2].update(fqn="sub"),
        [("module-call-graph-invalid", "/graph_module/module_call_graph/2/fqn")],
    ),
    (
        "call graph names",
        "preserve_sig",
        lambda d: d["graph_module"]["module_call_graph"][1]["signature"]["inputs"][0].update(
            as_tensor={"name": "ghost"}
        ),
        [
            (
                "module-call-graph-invalid",
                "/graph_module/module_call_graph/1/signature/inputs/0/as_tensor/name",
            )
        ],
    ),
    (
        "empty call graph",
        "conv",
        lambda d: d["graph_module"].update(module_call_graph=[]),
        [("module-call-graph-invalid", "/graph_module/module_call_graph")],
    ),
    (
        "opset",
        "conv",
        _drop("opset_version", "aten"),
        [("opset-missing", "/opset_version")],
    ),
]


@pytest.mark.parametrize(
    ("name", "mutate", "expected"),
    [case[1:] for case in SEMANTIC_CASES],
    ids=[case[0] for case in SEMANTIC_CASES],
)
def test_each_semantic_rule(
    zoo_json: dict[str, bytes], name: str, mutate: Mutation, expected: list[tuple[str, str]]
) -> None:
    report = validate_document(_doc(zoo_json, name, mutate), "semantic", SETTINGS)
    assert _errors(report) == expected
    assert not report.valid
    # schema level does not look at any of it
    assert validate_document(_doc(zoo_json, name, mutate), "schema", SETTINGS).valid


def test_ranges_torch_drops_are_warnings(zoo_json: dict[str, bytes]) -> None:
    # torch's loader logs "Symbol s99 did not appear in the graph" and drops the entry
    def mutate(doc: dict[str, Any]) -> None:
        doc["range_constraints"].update(
            {"s99": {"min_val": 2, "max_val": 8}, "s17 + s99": {"min_val": 2, "max_val": 8}}
        )

    report = validate_document(_doc(zoo_json, "dynamic", mutate), "semantic", SETTINGS)
    assert report.valid
    assert [(f.code, f.severity, f.path) for f in report.findings] == [
        ("range-unknown-symbol", "warning", "/range_constraints/s99"),
        ("range-unknown-symbol", "warning", "/range_constraints/s17 + s99"),
    ]
    assert unused_ranges(_doc(zoo_json, "dynamic", mutate)) == ["s99", "s17 + s99"]
    assert unused_ranges(_doc(zoo_json, "dynamic")) == []


def test_weights_missing_mismatched_and_unused(
    zoo: dict[str, ZooProgram], zoo_json: dict[str, bytes]
) -> None:
    tensors = _archive_tensors(zoo["linear_bn_train"].ep)
    del tensors["linear.bias"]
    weight = tensors["linear.weight"]
    tensors["linear.weight"] = weight.model_copy(update={"dtype": schema.ScalarType.HALF})
    tensors["bn.running_var"] = weight
    tensors["stray"] = weight
    report = validate_document(_doc(zoo_json, "linear_bn_train"), "semantic", SETTINGS, tensors)
    specs = "/graph_module/signature/input_specs"
    assert [(f.code, f.severity, f.path) for f in report.findings] == [
        ("weight-mismatch", "error", f"{specs}/0/parameter/parameter_name"),
        ("weight-missing", "error", f"{specs}/1/parameter/parameter_name"),
        ("weight-mismatch", "error", f"{specs}/5/buffer/buffer_name"),
        ("weight-unused", "warning", ""),
    ]
    assert "float32[8, 4]" in report.findings[0].message
    assert "float16[8, 4]" in report.findings[0].message
    assert "'stray'" in report.findings[3].message


def test_many_findings_of_one_code_are_truncated(zoo_json: dict[str, bytes]) -> None:
    def mutate(doc: dict[str, Any]) -> None:
        node = _graph(doc)["nodes"][0]
        # a torch-level Python target: no operator schema limits its arguments
        node["target"] = "_operator.add"
        node["inputs"] = [
            {"name": "x", "arg": {"as_tensor": {"name": f"ghost{i}"}}, "kind": 1}
            for i in range(250)
        ]

    report = validate_document(_doc(zoo_json, "conv", mutate), "semantic", SETTINGS)
    codes = [f.code for f in report.findings]
    assert codes == ["name-undefined"] * 200 + ["findings-truncated"]
    assert report.findings[-1].message == "50 more 'name-undefined' findings not listed"


# ---------------------------------------------------------------- schema history


def _all_nodes(doc: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    stack = [_graph(doc)]
    while stack:
        graph = stack.pop()
        for node in graph["nodes"]:
            found.append(node)
            stack.extend(
                i["arg"]["as_graph"]["graph"] for i in node["inputs"] if "as_graph" in i["arg"]
            )
    return found


def _strip_names(doc: dict[str, Any]) -> None:
    for node in _all_nodes(doc):
        node["name"] = None


def _strip_kinds(doc: dict[str, Any]) -> None:
    _strip_names(doc)
    for node in _all_nodes(doc):
        for named in node["inputs"]:
            named["kind"] = None


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_min_schema_version_follows_what_the_document_uses(
    zoo_json: dict[str, bytes], name: str
) -> None:
    raw = orjson.loads(zoo_json[name])
    nodes = _all_nodes(raw)
    # torch 2.13 names every node: Node.name appeared in 8.17 (torch 2.11)
    assert all(node["name"] for node in nodes)
    report = validate_document(_doc(zoo_json, name), "schema", SETTINGS)
    assert (report.min_schema_version, report.oldest_torch_release) == ("8.17", "2.11.0")
    # without names: guards_code is 8.14; NamedArgument.kind and a set HOP flag are 8.7
    hop_flag = any(node["is_hop_single_tensor_return"] is not None for node in nodes)
    kinds = any(named["kind"] is not None for node in nodes for named in node["inputs"])
    expected = "8.14" if raw["guards_code"] else "8.7" if kinds or hop_flag else "8.2"
    assert schema.format_version(schema_floor(_doc(zoo_json, name, _strip_names))) == expected
    # without kinds too: only the HOP flag of torch.cond keeps 8.7 (the floor is 8.2)
    expected = "8.14" if raw["guards_code"] else "8.7" if hop_flag else "8.2"
    assert schema.format_version(schema_floor(_doc(zoo_json, name, _strip_kinds))) == expected


def test_as_float_lists_and_new_dtypes_need_8_20(zoo_json: dict[str, bytes]) -> None:
    def float_lists(doc: dict[str, Any]) -> None:
        arg = {"as_float_lists": [[1.0, 2.5]]}
        _graph(doc)["nodes"][0]["inputs"].append({"name": "extra", "arg": arg, "kind": 2})

    def uint64(doc: dict[str, Any]) -> None:
        _graph(doc)["tensor_values"]["relu"]["dtype"] = schema.ScalarType.UINT64.value

    def uint16(doc: dict[str, Any]) -> None:
        _strip_kinds(doc)
        _graph(doc)["tensor_values"]["relu"]["dtype"] = schema.ScalarType.UINT16.value

    def float8(doc: dict[str, Any]) -> None:
        _strip_kinds(doc)
        _graph(doc)["tensor_values"]["relu"]["dtype"] = schema.ScalarType.FLOAT8E5M2FNUZ.value

    # the oldest release that loads it losing nothing: 2.6-2.8 refuse the keys torch 2.13 writes
    # (cls(**data)), though at their default; 2.12.1 is the oldest 8.20 release we hold rules for
    for mutate, version, release in [
        (float_lists, "8.20", "2.12.1"),
        (uint64, "8.20", "2.12.1"),
        (uint16, "8.2", "2.9.1"),
        (float8, "8.14", "2.9.1"),
    ]:
        report = validate_document(_doc(zoo_json, "conv", mutate), "schema", SETTINGS)
        assert (report.min_schema_version, report.oldest_torch_release) == (version, release)
