"""The graph answer the UI draws (app.programs.inspect.graph_view), against torch's modules."""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch

import schema
from app.programs.inspect.graph_view import ProgramGraph, program_graph
from tests.zoo import build_program, torch_json


def _graph(name: str) -> tuple[torch.export.ExportedProgram, ProgramGraph]:
    ep = build_program(name).ep
    return ep, program_graph(schema.upgrade(torch_json(ep)).document)


def _calls(gm: Any) -> list[Any]:
    """torch's call nodes but getitem, which the document folds into its producer's outputs."""
    return [
        n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem
    ]


@pytest.mark.parametrize("name", ["conv", "cond", "multi_out", "constants"])
def test_nodes_are_torchs_call_nodes(name: str) -> None:
    """Graph 0 lists torch's call nodes in order, with their targets and output metadata."""
    ep, graph = _graph(name)
    calls = _calls(ep.graph_module)
    nodes = graph.nodes
    main = [i for i, g in enumerate(nodes.graph) if g == 0]
    assert [nodes.name[i] for i in main] == [n.name for n in calls]
    assert [nodes.position[i] for i in main] == list(range(len(calls)))
    dtypes, shapes, targets = (nodes.expanded(c) for c in ("dtype", "shape", "target"))
    for i, node in zip(main, calls, strict=True):
        value = node.meta["val"]
        if isinstance(value, torch.Tensor):
            assert dtypes[i] == str(value.dtype).removeprefix("torch.")
            assert shapes[i] == str(list(value.shape))
        target = targets[i]
        assert target is not None
        assert target.endswith(str(node.target))
    # each table holds each value once
    for table in (nodes.targets, nodes.dtypes, nodes.shapes):
        assert len(set(table)) == len(table)


def test_subgraphs_of_cond() -> None:
    """A cond node's branches are graphs of their own, run by that node, in their own module."""
    ep, graph = _graph("cond")
    targets = graph.nodes.expanded("target")
    [cond] = [i for i, t in enumerate(targets) if t == "torch.ops.higher_order.cond"]
    branches = {g.name: g for g in graph.graphs[1:]}
    assert set(branches) == {"true_graph_0", "false_graph_0"}
    for name, branch in branches.items():
        assert branch.node == cond
        module = graph.modules[branch.module]
        assert module.kind == "subgraph"
        assert module.path.endswith(name)
        torch_nodes = _calls(getattr(ep.graph_module, name))
        k = graph.graphs.index(branch)
        ours = [i for i, g in enumerate(graph.nodes.graph) if g == k]
        assert len(ours) == len(torch_nodes) == module.nodes
        assert all(graph.nodes.module[i] == branch.module for i in ours)


def test_modules_hold_their_nodes() -> None:
    """Every node sits in the innermost module of its nn_module_stack; totals add up."""
    ep, graph = _graph("conv")
    paths = [m.path for m in graph.modules]
    for i, node in enumerate(_calls(ep.graph_module)):
        stack = node.meta.get("nn_module_stack") or {}
        innermost = list(stack.values())[-1][0] if stack else ""
        assert paths[graph.nodes.module[i]] == innermost
    assert graph.modules[0].total_nodes == len(graph.nodes.name)
    assert sum(m.nodes for m in graph.modules) == len(graph.nodes.name)
