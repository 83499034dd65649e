"""The shared graph model: leaves of every argument arm, graph walks, define-before-use."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import schema
from app.programs.graph import (
    TOP_GRAPH,
    Leaf,
    leaves,
    nested,
    nested_leaves,
    references,
    scope,
    values,
    walk_graphs,
)

#: One wire argument per arm that holds values, with the leaves torch's serializer sees.
ARMS: list[tuple[dict[str, Any], list[tuple[str | None, str, str]]]] = [
    ({"as_tensor": {"name": "x"}}, [("x", "tensor", "/as_tensor/name")]),
    (
        {"as_tensors": [{"name": "a"}, {"name": "b"}]},
        [("a", "tensor", "/as_tensors/0/name"), ("b", "tensor", "/as_tensors/1/name")],
    ),
    (
        {"as_nested_tensors": [[{"name": "a"}], [{"name": "b"}, {"name": "c"}]]},
        [
            ("a", "tensor", "/as_nested_tensors/0/0/name"),
            ("b", "tensor", "/as_nested_tensors/1/0/name"),
            ("c", "tensor", "/as_nested_tensors/1/1/name"),
        ],
    ),
    (
        {"as_optional_tensors": [{"as_none": True}, {"as_tensor": {"name": "t"}}]},
        [
            (None, "tensor", "/as_optional_tensors/0"),
            ("t", "tensor", "/as_optional_tensors/1/as_tensor/name"),
        ],
    ),
    (
        {"as_optional_tensor": {"as_tensor": {"name": "t"}}},
        [("t", "tensor", "/as_optional_tensor/as_tensor/name")],
    ),
    ({"as_optional_tensor": {"as_none": True}}, [(None, "tensor", "/as_optional_tensor")]),
    ({"as_sym_int": {"as_name": "s0"}}, [("s0", "sym_int", "/as_sym_int/as_name")]),
    ({"as_sym_int": {"as_int": 3}}, [(None, "sym_int", "/as_sym_int")]),
    (
        {"as_sym_ints": [{"as_int": 3}, {"as_name": "s1"}]},
        [(None, "sym_int", "/as_sym_ints/0"), ("s1", "sym_int", "/as_sym_ints/1/as_name")],
    ),
    ({"as_sym_float": {"as_name": "f"}}, [("f", "sym_float", "/as_sym_float/as_name")]),
    ({"as_sym_floats": [{"as_name": "f"}]}, [("f", "sym_float", "/as_sym_floats/0/as_name")]),
    ({"as_sym_bool": {"as_name": "b"}}, [("b", "sym_bool", "/as_sym_bool/as_name")]),
    ({"as_sym_bools": [{"as_bool": True}]}, [(None, "sym_bool", "/as_sym_bools/0")]),
    (
        {"as_custom_obj": {"name": "obj", "class_fqn": "m.C"}},
        [("obj", "custom_obj", "/as_custom_obj/name")],
    ),
    ({"as_int": 1}, []),
    ({"as_ints": [1, 2]}, []),
    ({"as_string": "x"}, []),
]


def _node(args: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> schema.Node:
    wire = {
        "target": "torch.ops.aten.add.Tensor",
        "inputs": [{"name": f"a{i}", "arg": arg, "kind": 1} for i, arg in enumerate(args)],
        "outputs": outputs,
        "metadata": {},
    }
    return schema.load(orjson.dumps(wire), schema.Node)


def _resolve(wire: Any, at: str) -> Any:
    for part in at.split("/")[1:]:
        wire = wire[int(part)] if isinstance(wire, list) else wire[part]
    return wire


@pytest.mark.parametrize(("wire", "expected"), ARMS, ids=lambda v: str(v)[:40])
def test_leaves_of_each_arm(
    wire: dict[str, Any], expected: list[tuple[str | None, str, str]]
) -> None:
    arg = _node([wire], []).inputs[0].arg
    found = leaves(arg)
    assert [tuple(leaf) for leaf in found] == expected
    for name, _, at in found:
        # a named leaf's pointer leads to its name; a literal's to the slot it fills
        target = _resolve(orjson.loads(schema.dump(arg)), at)
        assert target == name if name is not None else not isinstance(target, str)
    assert values(arg) == [n for n, _, _ in expected if n is not None]


def test_string_to_argument_is_nested_only_outside_canonical_form() -> None:
    wire = {"as_string_to_argument": {"k/1": {"as_tensor": {"name": "x"}}, "b": {"as_int": 1}}}
    arg = _node([wire], []).inputs[0].arg
    assert leaves(arg) == []
    assert nested_leaves(arg) == [Leaf("x", "tensor", "/as_string_to_argument/k~11/as_tensor/name")]
    assert list(references(arg, "/p")) == [
        ("x", "/p/as_string_to_argument/k~11/as_tensor/name", "tensor")
    ]
    assert values(arg) == ["x"]


def _graph(inputs: list[str], nodes: list[tuple[list[str], list[str]]], outputs: list[str]) -> Any:
    def tensors(names: list[str]) -> list[dict[str, Any]]:
        return [{"as_tensor": {"name": n}} for n in names]

    wire = {
        "inputs": tensors(inputs),
        "outputs": tensors(outputs),
        "tensor_values": {},
        "sym_int_values": {},
        "sym_bool_values": {},
        "nodes": [
            {
                "target": "t",
                "inputs": [{"name": "i", "arg": a, "kind": 1} for a in tensors(ins)],
                "outputs": tensors(outs),
                "metadata": {},
            }
            for ins, outs in nodes
        ],
    }
    return schema.load(orjson.dumps(wire), schema.Graph)


def test_scope_classifies_definitions_and_uses() -> None:
    graph = _graph(["x", "x"], [(["x", "y"], ["z"]), (["w"], ["y", "z"])], ["z", "q"])
    refs = [(r.name, r.defines, r.node, r.slot, r.status) for r in scope(graph)]
    assert refs == [
        ("x", True, None, 0, "ok"),
        ("x", True, None, 1, "redefined"),
        ("x", False, 0, 0, "ok"),
        ("y", False, 0, 1, "later"),
        ("z", True, 0, 0, "ok"),
        ("w", False, 1, 0, "undefined"),
        ("y", True, 1, 0, "ok"),
        ("z", True, 1, 1, "redefined"),
        ("z", False, None, 0, "ok"),
        ("q", False, None, 1, "undefined"),
    ]
    pointers = [(r.argument("/g"), r.pointer("/g")) for r in scope(graph)][2:5]
    assert pointers == [
        ("/g/nodes/0/inputs/0/arg", "/g/nodes/0/inputs/0/arg/as_tensor/name"),
        ("/g/nodes/0/inputs/1/arg", "/g/nodes/0/inputs/1/arg/as_tensor/name"),
        ("/g/nodes/0/outputs/0", "/g/nodes/0/outputs/0/as_tensor/name"),
    ]


def test_scope_takes_inputs_in_the_order_given() -> None:
    graph = _graph(["a", "b"], [], ["a"])
    refs = [
        (r.name, r.slot) for r in scope(graph, inputs=[(1, graph.inputs[1]), (0, graph.inputs[0])])
    ]
    assert refs == [("b", 1), ("a", 0), ("a", 0)]


def test_walk_graphs_reaches_every_subgraph(zoo_json: dict[str, bytes]) -> None:
    doc = schema.load(zoo_json["cond"], schema.ExportedProgram)
    wire = orjson.loads(zoo_json["cond"])
    sites = list(walk_graphs(doc.graph_module.graph))
    assert (sites[0].pointer, sites[0].owner, sites[0].dotted) == (TOP_GRAPH, None, "")
    assert len(sites) == 3  # the top graph and cond's two branches
    for site in sites[1:]:
        assert site.owner is not None
        assert site.owner.target.endswith("cond")
        assert site.dotted in {"true_graph_0", "false_graph_0"}
        assert len(_resolve(wire, site.pointer)["nodes"]) == len(site.graph.nodes)


def test_nested_reaches_into_maps_of_maps() -> None:
    inner = {"as_string_to_argument": {"b": {"as_tensor": {"name": "x"}}}}
    op = {"as_operator": "torch.ops.aten.add.Tensor"}
    arg = _node([{"as_string_to_argument": {"a": inner, "c": op}}], []).inputs[0].arg
    found = [(sub.kind, at) for sub, at in nested(arg, "/p")]
    assert found == [
        ("as_tensor", "/p/as_string_to_argument/a/as_string_to_argument/b"),
        ("as_operator", "/p/as_string_to_argument/c"),
    ]
    assert list(references(arg)) == [
        ("x", "/as_string_to_argument/a/as_string_to_argument/b/as_tensor/name", "tensor")
    ]
