"""One node of a program as a person inspecting it wants it: every argument (tensors with their
dtype and shape, scalars and lists as literals), every output's metadata, and where it came
from (the module stack, the source function and the Python stack trace the exporter recorded).

Nodes are named as the graph answer (`app.programs.inspect.graph_view`) numbers them: a graph
index (0 the program's own graph, then subgraphs breadth-first, in the order of the nodes that
take them) and the node's position in that graph.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.archive.tensors import dtype_name
from app.programs.diff.arguments import render_argument
from app.programs.graph import values as value_names
from app.programs.inspect.common import (
    InspectFailure,
    graph_stacks,
    node_name,
    size_text,
    subgraph_inputs,
)
from schema.models import ExportedProgram, Graph, TensorMeta


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ValueInfo(_View):
    """A value a node reads or defines: its name, and dtype and shape when it is a tensor."""

    name: str
    dtype: str | None = None
    shape: str | None = None


class ArgumentInfo(_View):
    """One argument: its name, as written (literals in Python spelling), and the values read."""

    name: str
    text: str
    values: list[ValueInfo]


class ModuleFrame(_View):
    """One module call of the node's stack, outermost first."""

    path: str
    type: str | None


class NodeDetails(_View):
    """A node's arguments, outputs and origin."""

    graph: int
    position: int
    name: str
    target: str
    arguments: list[ArgumentInfo]
    outputs: list[ValueInfo]
    module_stack: list[ModuleFrame]
    #: the Python stack the exporter recorded (None: the program carries none)
    stack_trace: str | None
    #: the torch function or module class the node was traced from
    source_fn: str | None
    #: every other metadata entry, as written
    metadata: dict[str, str]


_SHOWN = ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn")


def graphs_in_order(doc: ExportedProgram) -> list[Graph]:
    """The program's graphs as the graph answer numbers them."""
    found: list[Graph] = []
    pending = [doc.graph_module.graph]
    while pending:
        graph = pending.pop(0)
        found.append(graph)
        pending.extend(sub.graph for node in graph.nodes for _, sub in subgraph_inputs(node))
    return found


def _value(name: str, metas: dict[str, TensorMeta]) -> ValueInfo:
    meta = metas.get(name)
    if meta is None:
        return ValueInfo(name=name)
    shape = f"[{', '.join(size_text(s) for s in meta.sizes)}]"
    return ValueInfo(name=name, dtype=dtype_name(meta.dtype), shape=shape)


def node_details(doc: ExportedProgram, graph: int, position: int) -> NodeDetails:
    """The node at `position` of graph number `graph` (InspectFailure when there is none)."""
    graphs = graphs_in_order(doc)
    if not 0 <= graph < len(graphs) or not 0 <= position < len(graphs[graph].nodes):
        raise InspectFailure("node-not-found", f"no node {position} in graph {graph}")
    where = graphs[graph]
    node = where.nodes[position]
    metas = where.tensor_values
    arguments = [
        ArgumentInfo(
            name=named.name,
            text=render_argument(named.arg),
            values=[_value(v, metas) for v in value_names(named.arg)],
        )
        for named in node.inputs
    ]
    outputs = [_value(v, metas) for out in node.outputs for v in value_names(out)]
    # a node may carry no stack of its own (it belongs to the call of the node before it)
    stack = graph_stacks(where, f"/graphs/{graph}/nodes")[position]
    source = node.metadata.get("source_fn_stack") or node.metadata.get("torch_fn")
    return NodeDetails(
        graph=graph,
        position=position,
        name=node_name(node, position),
        target=node.target,
        arguments=arguments,
        outputs=outputs,
        module_stack=[ModuleFrame(path=e.path, type=e.type) for e in stack if e.path],
        stack_trace=node.metadata.get("stack_trace"),
        source_fn=source,
        metadata={k: v for k, v in node.metadata.items() if k not in _SHOWN},
    )
