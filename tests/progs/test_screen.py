"""The safety screen on real zoo documents: clean ones pass, each hostile mutation is refused."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import torch
from torch._export.serde.serialize import _SYM_OPS, GraphModuleSerializer

import schema
from app.programs.findings import Finding
from app.programs.screen import UnsafeProgram, custom_namespaces, refuse_if_unsafe, screen
from app.programs.validation import validate_document
from app.settings import Limits
from tests.zoo import PROGRAM_NAMES, torch_json

SETTINGS = Limits()
LENIENT = dataclasses.replace(SETTINGS, allow_opaque_pickles=True)
HOSTILE = "__import__('os').system('touch /tmp/pt2serde-pwned')"
NODES = "/graph_module/graph/nodes"
ROOT_SIGNATURE = "/graph_module/module_call_graph/0/signature"
Mutation = Callable[[dict[str, Any]], None]

#: the in_spec torch 2.13 writes for forward(d) called with {Color.RED: t, Color.BLUE: t}
ENUM_IN_SPEC = json.dumps(
    [
        1,
        {
            "type": "builtins.tuple",
            "context": "null",
            "children_spec": [
                {
                    "type": "builtins.tuple",
                    "context": "null",
                    "children_spec": [
                        {
                            "type": "builtins.dict",
                            "context": json.dumps(
                                [
                                    {"__enum__": True, "fqn": "__main__:Color", "name": "RED"},
                                    {"__enum__": True, "fqn": "__main__:Color", "name": "BLUE"},
                                ]
                            ),
                            "children_spec": [
                                {"type": None, "context": None, "children_spec": []},
                                {"type": None, "context": None, "children_spec": []},
                            ],
                        }
                    ],
                },
                {"type": "builtins.dict", "context": "[]", "children_spec": []},
            ],
        },
    ]
)


def _doc(zoo_json: dict[str, bytes], name: str, mutate: Mutation | None = None) -> Any:
    raw = orjson.loads(zoo_json[name])
    if mutate is not None:
        mutate(raw)
    return schema.load(orjson.dumps(raw), schema.ExportedProgram)


def _found(findings: list[Finding]) -> list[tuple[str, str, str]]:
    return [(f.code, f.severity, f.path) for f in findings]


def _graph(doc: dict[str, Any]) -> dict[str, Any]:
    graph: dict[str, Any] = doc["graph_module"]["graph"]
    return graph


def _root_signature(doc: dict[str, Any]) -> dict[str, Any]:
    signature: dict[str, Any] = doc["graph_module"]["module_call_graph"][0]["signature"]
    return signature


def _spec(node_type: str, context: Any) -> str:
    leaf: dict[str, Any] = {"type": None, "context": None, "children_spec": []}
    return json.dumps([1, {"type": node_type, "context": context, "children_spec": [leaf]}])


def _set(path: list[str | int], value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _custom_object(doc: dict[str, Any]) -> None:
    obj = {"name": "obj", "class_fqn": "__torch__.torch.classes.evil.Payload"}
    _graph(doc)["inputs"][0] = {"as_custom_obj": obj}
    doc["graph_module"]["signature"]["input_specs"][0] = {
        "custom_obj": {"arg": obj, "custom_obj_name": "payload"}
    }


def _operator_argument(doc: dict[str, Any]) -> None:
    _graph(doc)["nodes"][1]["inputs"].append(
        {"name": "_mutable_op", "arg": {"as_operator": "torch.os.system"}, "kind": 1}
    )


def _branch_target(doc: dict[str, Any]) -> None:
    branch = _graph(doc)["nodes"][2]["inputs"][2]["arg"]["as_graph"]["graph"]
    branch["nodes"][0]["target"] = "torch.load"


CASES: list[tuple[str, str, Mutation, list[tuple[str, str, str]]]] = [
    (
        "tensor size expression",
        "dynamic",
        _set(
            ["graph_module", "graph", "tensor_values", "x", "sizes", 0, "as_expr", "expr_str"],
            HOSTILE,
        ),
        [
            (
                "unsafe-expression",
                "error",
                "/graph_module/graph/tensor_values/x/sizes/0/as_expr/expr_str",
            )
        ],
    ),
    (
        "storage offset expression",
        "conv",
        _set(
            ["graph_module", "graph", "tensor_values", "relu", "storage_offset"],
            {"as_expr": {"expr_str": "s0.__class__", "hint": None}},
        ),
        [
            (
                "unsafe-expression",
                "error",
                "/graph_module/graph/tensor_values/relu/storage_offset/as_expr/expr_str",
            )
        ],
    ),
    (
        "sym int value",
        "symint_out",
        _set(["graph_module", "graph", "sym_int_values", "mul", "as_expr", "expr_str"], HOSTILE),
        [("unsafe-expression", "error", "/graph_module/graph/sym_int_values/mul/as_expr/expr_str")],
    ),
    (
        "range constraint key",
        "dynamic",
        lambda d: d["range_constraints"].update({"exec('x')": {"min_val": 0, "max_val": 1}}),
        [("unsafe-expression", "error", "/range_constraints/exec('x')")],
    ),
    (
        "guards code",
        "dynamic",
        lambda d: d["guards_code"].append(HOSTILE),
        [("unsafe-guards-code", "error", "/guards_code/2")],
    ),
    (
        "enum in a treespec",
        "pytree",
        lambda d: _root_signature(d).update(in_spec=ENUM_IN_SPEC),
        [("unsafe-treespec", "error", f"{ROOT_SIGNATURE}/in_spec")],
    ),
    (
        "defaultdict factory",
        "conv",
        lambda d: _root_signature(d).update(
            out_spec=_spec(
                "collections.defaultdict",
                {
                    "default_factory_module": "os",
                    "default_factory_name": "system",
                    "dict_context": [],
                },
            )
        ),
        [("unsafe-treespec", "error", f"{ROOT_SIGNATURE}/out_spec")],
    ),
    (
        "type that is not a name",
        "conv",
        lambda d: _root_signature(d).update(out_spec=_spec("os:system", "null")),
        [("unsafe-treespec", "error", f"{ROOT_SIGNATURE}/out_spec")],
    ),
    (
        "treespec that is not JSON",
        "conv",
        lambda d: _root_signature(d).update(out_spec="(1, 'x')"),
        [("unsafe-treespec", "error", f"{ROOT_SIGNATURE}/out_spec")],
    ),
    (
        "python target",
        "conv",
        _set(["graph_module", "graph", "nodes", 1, "target"], "torch.os.system"),
        [("unsafe-target", "error", f"{NODES}/1/target")],
    ),
    (
        "builtin target",
        "symint_out",
        _set(["graph_module", "graph", "nodes", 2, "target"], "builtins.print"),
        [("unsafe-target", "error", f"{NODES}/2/target")],
    ),
    (
        "dunder in an operator path",
        "conv",
        _set(["graph_module", "graph", "nodes", 1, "target"], "torch.ops.aten.__class__.mro"),
        [("unsafe-target", "error", f"{NODES}/1/target")],
    ),
    (
        "torch.ops attribute",
        "conv",
        _set(["graph_module", "graph", "nodes", 1, "target"], "torch.ops.load_library.x.y"),
        [("unsafe-target", "error", f"{NODES}/1/target")],
    ),
    (
        "target in a cond branch",
        "cond",
        _branch_target,
        [
            (
                "unsafe-target",
                "error",
                f"{NODES}/2/inputs/2/arg/as_graph/graph/nodes/0/target",
            )
        ],
    ),
    (
        "operator argument",
        "conv",
        _operator_argument,
        [("unsafe-target", "error", f"{NODES}/1/inputs/1/arg/as_operator")],
    ),
    (
        "file-reading operator",
        "conv",
        _set(["graph_module", "graph", "nodes", 1, "target"], "torch.ops.aten.from_file.default"),
        [("unsafe-operator", "error", f"{NODES}/1/target")],
    ),
    (
        "file-writing operator",
        "conv",
        _set(["graph_module", "graph", "nodes", 3, "target"], "torch.ops.aten.save.default"),
        [("unsafe-operator", "error", f"{NODES}/3/target")],
    ),
    (
        "custom object",
        "conv",
        _custom_object,
        [("unsafe-custom-object", "error", "/graph_module/signature/input_specs/0/custom_obj")],
    ),
]


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_zoo_programs_pass_the_screen(zoo_json: dict[str, bytes], name: str) -> None:
    found = screen(_doc(zoo_json, name), SETTINGS)
    # the custom op's namespace is only a note: torch needs its library imported first
    notes = [("operator-namespace-to-register", "info")] if name == "custom_op" else []
    assert [(f.code, f.severity) for f in found] == notes


@pytest.mark.parametrize(
    ("name", "mutate", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_hostile_mutation_is_refused(
    zoo_json: dict[str, bytes], name: str, mutate: Mutation, expected: list[tuple[str, str, str]]
) -> None:
    doc = _doc(zoo_json, name, mutate)
    findings = screen(doc, SETTINGS)
    assert _found(findings) == expected
    report = validate_document(doc, "semantic", SETTINGS)
    assert not report.valid
    assert set(expected) <= set(_found(report.findings))
    with pytest.raises(UnsafeProgram) as caught:
        refuse_if_unsafe(findings)
    assert caught.value.code == expected[0][0]
    assert [(i.code, i.path) for i in caught.value.issues] == [(c, p) for c, _, p in expected]


def test_pickled_members_are_refused_except_sample_inputs(zoo_json: dict[str, bytes]) -> None:
    doc = _doc(zoo_json, "conv")
    pickled = [
        "archive/data/sample_inputs/model.pt",
        "archive/data/constants/custom_obj_0",
        "archive/extra/model.forward.sample_input.pt",
        "archive/data/weights/weight_0",
    ]
    findings = screen(doc, SETTINGS, pickled)
    assert _found(findings) == [("unsafe-pickle", "error", "")] * 2
    assert [f.message for f in findings] == [
        "archive member 'archive/data/constants/custom_obj_0' is a pickle",
        "archive member 'archive/data/weights/weight_0' is a pickle",
    ]
    allowed = screen(doc, LENIENT, pickled)
    assert _found(allowed) == [("unsafe-pickle", "warning", "")] * 2
    refuse_if_unsafe(allowed)


def test_custom_objects_are_a_warning_when_opaque_pickles_are_allowed(
    zoo_json: dict[str, bytes],
) -> None:
    doc = _doc(zoo_json, "conv", _custom_object)
    path = "/graph_module/signature/input_specs/0/custom_obj"
    assert _found(screen(doc, LENIENT)) == [("unsafe-custom-object", "warning", path)]


def test_a_custom_object_input_without_its_spec(zoo_json: dict[str, bytes]) -> None:
    def mutate(doc: dict[str, Any]) -> None:
        obj = {"name": "obj", "class_fqn": "__torch__.torch.classes.evil.Payload"}
        _graph(doc)["inputs"][0] = {"as_custom_obj": obj}

    path = "/graph_module/graph/inputs/0/as_custom_obj"
    findings = screen(_doc(zoo_json, "conv", mutate), SETTINGS)
    assert _found(findings) == [("unsafe-custom-object", "error", path)]


def test_registered_pytree_types_are_noted(zoo_json: dict[str, bytes]) -> None:
    # what torch writes for a dataclass output registered as "mypkg.outputs.Out"
    dataclass_spec = json.dumps(
        [
            1,
            {
                "type": "mypkg.outputs.Out",
                "context": '[["a", "b"], []]',
                "children_spec": [
                    {"type": None, "context": None, "children_spec": []},
                    {"type": None, "context": None, "children_spec": []},
                ],
            },
        ]
    )

    def mutate(doc: dict[str, Any]) -> None:
        _root_signature(doc)["out_spec"] = dataclass_spec
        _root_signature(doc)["in_spec"] = _spec("collections.namedtuple", "mypkg.Point")

    doc = _doc(zoo_json, "conv", mutate)
    findings = screen(doc, SETTINGS)
    assert _found(findings) == [
        ("treespec-type-to-register", "info", f"{ROOT_SIGNATURE}/in_spec"),
        ("treespec-type-to-register", "info", f"{ROOT_SIGNATURE}/out_spec"),
    ]
    assert "'mypkg.Point'" in findings[0].message
    assert "'mypkg.outputs.Out'" in findings[1].message
    refuse_if_unsafe(findings)
    assert validate_document(doc, "semantic", SETTINGS).valid


def test_builtin_containers_with_torch_contexts_pass(zoo_json: dict[str, bytes]) -> None:
    specs = [
        _spec("collections.OrderedDict", '["a"]'),
        _spec("collections.deque", "null"),
        _spec(
            "collections.defaultdict",
            {
                "default_factory_module": "builtins",
                "default_factory_name": "list",
                "dict_context": ["a"],
            },
        ),
        _spec("torch.fx.immutable_collections.immutable_list", "null"),
    ]
    for spec in specs:
        doc = _doc(
            zoo_json,
            "conv",
            _set(["graph_module", "module_call_graph", 0, "signature", "out_spec"], spec),
        )
        assert screen(doc, SETTINGS) == [], spec


def test_every_target_torch_writes_for_symbolic_ops_is_allowed(zoo_json: dict[str, bytes]) -> None:
    names = sorted(GraphModuleSerializer.serialize_operator(None, op) for op in _SYM_OPS)  # type: ignore[arg-type]
    assert "_operator.floordiv" in names
    for target in names:
        doc = _doc(
            zoo_json, "symint_out", _set(["graph_module", "graph", "nodes", 2, "target"], target)
        )
        assert screen(doc, SETTINGS) == [], target


class _Wrapped(torch.nn.Module):
    """Grad mode, autocast and vmap: the Python-level targets pre-dispatch export writes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = x * 2
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = y @ y.T
        w = torch.vmap(lambda t: t.sin() + 1)(x)
        out: torch.Tensor = z.float() + w.sum()
        return out


def test_targets_of_a_live_pre_dispatch_export_are_allowed() -> None:
    ep = torch.export.export(_Wrapped(), (torch.randn(3, 3),), strict=False)
    data = torch_json(ep)
    assert b'"torch._functorch.predispatch._vmap_increment_nesting"' in data
    assert b'"torch.ops.higher_order.wrap_with_autocast"' in data
    doc = schema.load(data, schema.ExportedProgram)
    assert screen(doc, SETTINGS) == []


def test_custom_namespaces(zoo_json: dict[str, bytes]) -> None:
    assert custom_namespaces(_doc(zoo_json, "custom_op")) == ["pt2zoo"]
    assert custom_namespaces(_doc(zoo_json, "cond")) == []
    doc = _doc(
        zoo_json,
        "conv",
        _set(["graph_module", "graph", "nodes", 1, "target"], "torch.ops.mylib.fused.default"),
    )
    assert custom_namespaces(doc) == ["mylib"]
    (note,) = screen(doc, SETTINGS)
    assert (note.code, note.severity, note.path) == (
        "operator-namespace-to-register",
        "info",
        f"{NODES}/1/target",
    )
    assert "'mylib'" in note.message
    assert "PT2SERDE_WORKER_IMPORTS" in note.message
    # torch's own pt2e namespace: workers import its module, nothing to register
    target = "torch.ops.quantized_decomposed.quantize_per_tensor.default"
    doc = _doc(zoo_json, "conv", _set(["graph_module", "graph", "nodes", 1, "target"], target))
    assert custom_namespaces(doc) == []
    assert screen(doc, SETTINGS) == []


def test_refuse_if_unsafe_ignores_warnings_and_notes() -> None:
    notes = [
        Finding(code="unsafe-pickle", severity="warning", path="", message="m"),
        Finding(code="treespec-type-to-register", severity="info", path="/x", message="m"),
    ]
    refuse_if_unsafe(notes)
    error = Finding(code="unsafe-target", severity="error", path="/y", message="bad")
    with pytest.raises(UnsafeProgram) as caught:
        refuse_if_unsafe([*notes, error])
    assert caught.value.code == "unsafe-target"
    assert [i.code for i in caught.value.issues] == [
        "unsafe-pickle",
        "treespec-type-to-register",
        "unsafe-target",
    ]
