"""A program's graph as a viewer draws it: every node, subgraphs' too, grouped by module.

Nodes are listed in columns (one list per attribute, index = node id) because a 50,000-node
program is a few megabytes this way and a browser reads it in one JSON parse, where an object
per node costs several times more on both sides. The module tree is the one
`app.programs.inspect.modules.module_tree` rebuilds (``torch.export.unflatten``'s hierarchy);
a node of the program's graph belongs to the innermost module call of its stack, a node of a
higher-order operator's subgraph to that subgraph's module (``<owner>.<subgraph name>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.archive.tensors import dtype_name
from app.programs.inspect.common import (
    NODES_POINTER,
    WeightInfo,
    expression_text,
    graph_inputs,
    graph_outputs,
    graph_stacks,
    node_inputs,
    node_name,
    node_outputs,
    size_text,
    subgraph_inputs,
)
from app.programs.inspect.modules import module_tree
from schema.io import no_cycle_collection
from schema.models import ExportedProgram, Graph, TensorMeta


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ViewModule(_View):
    """A module of the hierarchy: where it sits, what it is, how much it holds."""

    path: str
    #: index of the parent module in `ProgramGraph.modules` (-1 for the root)
    parent: int
    kind: Literal["module", "subgraph"]
    type: str | None
    calls: int
    #: nodes of this module itself, and of it with everything under it
    nodes: int
    total_nodes: int
    #: parameter elements and bytes of this module and everything under it
    parameters: int
    parameter_bytes: int


class ViewGraph(_View):
    """A graph of the program: index 0 is the program's own, then every subgraph."""

    name: str
    #: index of the module holding the graph's nodes
    module: int
    #: id of the higher-order operator node that takes this subgraph (-1 for graph 0)
    node: int
    inputs: list[str]
    outputs: list[str]


class NodeColumns(_View):
    """Every node as columns: entry ``i`` of each list describes node id ``i``. A program's
    nodes share few operators, dtypes and shapes, so those columns hold an index into a table
    of the distinct values (`targets`, `dtypes`, `shapes`; -1: none) instead of the value: the
    50,007-node decoder's answer is 4.8 MB instead of 7.3, and Chromium parses it in 54-97 ms
    instead of 155-260 (`expanded` gives the values)."""

    graph: list[int] = Field(default_factory=list)
    #: index in its graph's node list (what a program diff's node positions count)
    position: list[int] = Field(default_factory=list)
    module: list[int] = Field(default_factory=list)
    name: list[str] = Field(default_factory=list)
    #: the operator, as its index in `targets`
    target: list[int] = Field(default_factory=list)
    #: dtype and shape of the first tensor output, as indices in `dtypes` and `shapes` (-1 when
    #: it has none)
    dtype: list[int] = Field(default_factory=list)
    shape: list[int] = Field(default_factory=list)
    inputs: list[list[str]] = Field(default_factory=list)
    outputs: list[list[str]] = Field(default_factory=list)
    targets: list[str] = Field(default_factory=list)
    dtypes: list[str] = Field(default_factory=list)
    shapes: list[str] = Field(default_factory=list)

    def expanded(self, column: Literal["target", "dtype", "shape"]) -> list[str | None]:
        """The values of an indexed column, node by node (None for -1)."""
        table: list[str] = getattr(self, f"{column}s")
        return [None if i < 0 else table[i] for i in getattr(self, column)]


class _Table:
    """The distinct values of a column, in order of first use, and each value's index."""

    def __init__(self, values: list[str]) -> None:
        self.values = values
        self.index: dict[str, int] = {}

    def of(self, value: str | None) -> int:
        if value is None:
            return -1
        found = self.index.get(value)
        if found is None:
            found = self.index[value] = len(self.values)
            self.values.append(value)
        return found


class SymbolRange(_View):
    """A shape symbol's range (None: unbounded)."""

    symbol: str
    min: int | None
    max: int | None


class ProgramGraph(_View):
    """The graph of a program for a viewer: modules, graphs, nodes and symbol ranges."""

    modules: list[ViewModule]
    graphs: list[ViewGraph]
    nodes: NodeColumns
    ranges: list[SymbolRange]


def _shape_text(meta: TensorMeta) -> str:
    return f"[{', '.join(size_text(s) for s in meta.sizes)}]"


def program_graph(
    doc: ExportedProgram, weights: Sequence[WeightInfo] | None = None
) -> ProgramGraph:
    """The program's nodes (subgraphs included) in columns, grouped by module; with the stored
    `weights`, a module's parameters count a tied storage once."""
    with no_cycle_collection():
        return _program_graph(doc, weights)


def _program_graph(doc: ExportedProgram, weights: Sequence[WeightInfo] | None) -> ProgramGraph:
    tree = module_tree(doc, weights)
    index = {info.path: i for i, info in enumerate(tree.modules)}
    modules = [
        ViewModule(
            path=info.path,
            parent=-1 if info.parent is None else index[info.parent],
            kind=info.kind,
            type=info.type,
            calls=info.calls,
            nodes=info.nodes,
            total_nodes=info.total_nodes,
            parameters=info.total_parameters.numel,
            parameter_bytes=info.total_parameters.nbytes,
        )
        for info in tree.modules
    ]
    columns = NodeColumns()
    targets, dtypes, shapes = (
        _Table(columns.targets),
        _Table(columns.dtypes),
        _Table(columns.shapes),
    )
    graphs: list[ViewGraph] = []
    main = doc.graph_module.graph
    stacks = graph_stacks(main, NODES_POINTER)
    owners = [index[stack[-1].path] for stack in stacks]
    # Subgraphs are numbered breadth-first: a graph's nodes are listed before its subgraphs'.
    pending: list[tuple[Graph, str, int, int, list[int] | None]] = [(main, "", 0, -1, owners)]
    while pending:
        graph, name, module, owner_node, node_modules = pending.pop(0)
        graph_id = len(graphs)
        graphs.append(
            ViewGraph(
                name=name,
                module=module,
                node=owner_node,
                inputs=graph_inputs(graph),
                outputs=graph_outputs(graph),
            )
        )
        metas = graph.tensor_values
        for i, node in enumerate(graph.nodes):
            node_id = len(columns.graph)
            node_module = module if node_modules is None else node_modules[i]
            outputs = node_outputs(node)
            meta = next((metas[o] for o in outputs if o in metas), None)
            columns.graph.append(graph_id)
            columns.position.append(i)
            columns.module.append(node_module)
            columns.name.append(node_name(node, i))
            columns.target.append(targets.of(node.target))
            columns.dtype.append(dtypes.of(None if meta is None else dtype_name(meta.dtype)))
            columns.shape.append(shapes.of(None if meta is None else _shape_text(meta)))
            columns.inputs.append(node_inputs(node))
            columns.outputs.append(outputs)
            path = tree.modules[node_module].path
            for _, sub in subgraph_inputs(node):
                sub_path = f"{path}.{sub.name}" if path else sub.name
                pending.append((sub.graph, sub.name, index[sub_path], node_id, None))
    return ProgramGraph(modules=modules, graphs=graphs, nodes=columns, ranges=symbol_ranges(doc))


def symbol_ranges(doc: ExportedProgram) -> list[SymbolRange]:
    """The ranges of the program's shape symbols (its dynamic dimensions), as written."""
    return [
        SymbolRange(symbol=expression_text(symbol), min=r.min_val, max=r.max_val)
        for symbol, r in doc.range_constraints.items()
    ]
