"""The one graph model every pass shares: graphs and subgraphs, the values an argument
references, and definitions before uses.

An argument's *leaves* are what torch's serializer (``_get_argument`` in
torch/_export/serde/serialize.py) sees in it: one leaf per tensor, symbol or script object slot,
a literal slot (a SymInt's ``as_int``, an absent optional tensor) being a leaf without a name.
``as_string_to_argument`` nests whole arguments; torch's canonical form does not look inside
(`leaves`), every other pass does (`nested_leaves`, `references`, `values`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, NamedTuple

import schema
from schema.errors import pointer
from schema.models import ValueKind

#: The value map of a graph that holds the metadata of each kind of value.
VALUE_MAPS: dict[ValueKind, str] = {
    "tensor": "tensor_values",
    "sym_int": "sym_int_values",
    "sym_float": "sym_float_values",
    "sym_bool": "sym_bool_values",
    "custom_obj": "custom_obj_values",
}

#: The JSON pointer of a document's top graph.
TOP_GRAPH = "/graph_module/graph"


class Leaf(NamedTuple):
    """One value slot of an argument: its name (None for a literal), kind, pointer below it."""

    name: str | None
    kind: ValueKind
    at: str


def _slot_leaf(slots: schema.ValueSlots) -> Callable[[Any, str], Leaf]:
    """The leaf of one slot at pointer `at` (a literal arm of a slot union has no name)."""
    kind, arm, path = slots.kind, slots.named_by, slots.name_path
    suffix = "".join(f"/{field}" for field in path)
    if arm is None:
        return lambda item, at: Leaf(item.name, kind, at + suffix)
    if len(path) == 1:
        return lambda item, at: (
            Leaf(getattr(item, path[0]), kind, at + suffix)
            if type(item) is arm
            else Leaf(None, kind, at)
        )
    return lambda item, at: (
        Leaf(getattr(item, path[0]).name, kind, at + suffix)
        if type(item) is arm
        else Leaf(None, kind, at)
    )


def _arm_leaves(arm: type[schema.Arm], slots: schema.ValueSlots) -> Callable[[Any], list[Leaf]]:
    tag, slot = arm.__tag__, _slot_leaf(slots)
    top = f"/{tag}"
    if slots.depth == 0:
        return lambda a: [slot(getattr(a, tag), top)]
    if slots.depth == 1:
        return lambda a: [slot(item, f"{top}/{i}") for i, item in enumerate(getattr(a, tag))]
    return lambda a: [
        slot(item, f"{top}/{i}/{j}")
        for i, row in enumerate(getattr(a, tag))
        for j, item in enumerate(row)
    ]


#: The leaves of each Argument arm that has any (torch's ``_get_argument``).
_LEAVES: dict[type[Any], Callable[[Any], list[Leaf]]] = {
    arm: _arm_leaves(arm, slots) for arm, slots in schema.ARGUMENT_ARMS.items() if slots is not None
}

_NO_LEAVES: list[Leaf] = []


def leaves(arg: Any) -> list[Leaf]:
    """The argument's own leaves, in torch's order; nothing inside ``as_string_to_argument``."""
    get = _LEAVES.get(type(arg))
    return _NO_LEAVES if get is None else get(arg)


def nested(arg: Any, path: str = "") -> Iterator[tuple[Any, str]]:
    """The argument, or every argument an ``as_string_to_argument`` holds (at any depth), each
    with its pointer."""
    if type(arg) is schema.ArgumentAsStringToArgument:
        for key, sub in arg.as_string_to_argument.items():
            yield from nested(sub, path + pointer(["as_string_to_argument", key]))
    else:
        yield arg, path


def nested_leaves(arg: Any) -> list[Leaf]:
    """The argument's leaves, including those of the arguments an ``as_string_to_argument``
    holds (their pointers run through the map's keys)."""
    get = _LEAVES.get(type(arg))
    if get is not None:
        return get(arg)
    if type(arg) is not schema.ArgumentAsStringToArgument:
        return _NO_LEAVES
    return [Leaf(n, k, where + at) for sub, where in nested(arg) for n, k, at in leaves(sub)]


def references(arg: Any, path: str = "") -> Iterator[tuple[str, str, ValueKind]]:
    """Every value name an argument mentions: (name, pointer to the name, kind of value)."""
    for name, kind, at in nested_leaves(arg):
        if name is not None:
            yield name, path + at, kind


def values(arg: Any) -> list[str]:
    """Names of the values (tensors, symbols, script objects) an argument refers to."""
    return [leaf.name for leaf in nested_leaves(arg) if leaf.name is not None]


# ---------------------------------------------------------------- graphs and subgraphs


class GraphSite(NamedTuple):
    """A graph of a program: the graph, its JSON pointer, its dotted name and owning node."""

    graph: schema.Graph
    pointer: str
    #: the names of the graph arguments leading to it, joined by "." ("" for the top graph)
    dotted: str
    #: the higher-order operator node that takes it (None for the top graph)
    owner: schema.Node | None


#: The argument arms that are or may hold a graph.
_GRAPH_CARRIERS = frozenset({schema.ArgumentAsGraph, schema.ArgumentAsStringToArgument})


def subgraphs(arg: Any, path: str) -> Iterator[tuple[schema.GraphArgument, str]]:
    """The graphs an argument carries (HOP branches and bodies), with their pointers."""
    for sub, where in nested(arg, path):
        if type(sub) is schema.ArgumentAsGraph:
            yield sub.as_graph, f"{where}/as_graph/graph"


def walk_graphs(graph: schema.Graph, path: str = TOP_GRAPH) -> Iterator[GraphSite]:
    """`graph` and every graph nested in it, outer before inner, in argument order."""
    stack = [GraphSite(graph, path, "", None)]
    while stack:
        site = stack.pop()
        yield site
        found: list[GraphSite] = []
        for i, node in enumerate(site.graph.nodes):
            for j, named in enumerate(node.inputs):
                if type(named.arg) not in _GRAPH_CARRIERS:
                    continue
                where = f"{site.pointer}/nodes/{i}/inputs/{j}/arg"
                for sub, at in subgraphs(named.arg, where):
                    dotted = f"{site.dotted}.{sub.name}" if site.dotted else sub.name
                    found.append(GraphSite(sub.graph, at, dotted, node))
        stack.extend(reversed(found))


# ---------------------------------------------------------------- definitions before uses


Status = Literal["ok", "redefined", "later", "undefined"]


class Ref(NamedTuple):
    """One definition or use of a value name in a graph, and how it stands.

    A definition is "ok" or "redefined"; a use is "ok" (defined before), "later" (defined only
    further down) or "undefined".
    """

    name: str
    kind: ValueKind
    defines: bool
    #: the node's position, or None for the graph's own inputs (definitions) and outputs (uses)
    node: int | None
    #: the argument's position among the graph's or node's inputs or outputs
    slot: int
    #: pointer from the argument to the name
    leaf: str
    status: Status

    def argument(self, graph: str) -> str:
        """The JSON pointer of the argument holding the name, below the graph at `graph`."""
        if self.node is None:
            return f"{graph}/{'inputs' if self.defines else 'outputs'}/{self.slot}"
        side = "outputs" if self.defines else "inputs"
        arg = "" if self.defines else "/arg"
        return f"{graph}/nodes/{self.node}/{side}/{self.slot}{arg}"

    def pointer(self, graph: str) -> str:
        """The JSON pointer of the name itself, below the graph at `graph`."""
        return self.argument(graph) + self.leaf


def scope(
    graph: schema.Graph,
    walk: Callable[[Any], list[Leaf]] = nested_leaves,
    inputs: Iterable[tuple[int, Any]] | None = None,
) -> Iterator[Ref]:
    """Every definition and use of a graph in program order: the inputs, then per node its
    inputs (uses) and outputs (definitions), then the graph's outputs (uses).

    `walk` gives an argument's leaves (`leaves` to look as torch's canonical form does);
    `inputs` are (position, argument) pairs when the inputs are to be taken in another order.
    """
    ins = list(enumerate(graph.inputs) if inputs is None else inputs)
    defined: set[str] = set()
    # every name the graph defines, worked out only when a use precedes its definition
    anywhere: set[str] | None = None
    for node, slot, arg, defines in _arguments(graph, ins):
        for name, kind, at in walk(arg):
            if name is None:
                continue
            status: Status
            if defines:
                status = "redefined" if name in defined else "ok"
                defined.add(name)
            elif name in defined:
                status = "ok"
            else:
                if anywhere is None:
                    anywhere = _definitions(graph, ins, walk)
                status = "later" if name in anywhere else "undefined"
            yield Ref(name, kind, defines, node, slot, at, status)


def _arguments(
    graph: schema.Graph, inputs: list[tuple[int, Any]]
) -> Iterator[tuple[int | None, int, Any, bool]]:
    """(node, slot, argument, whether it defines) of a graph in program order."""
    for slot, arg in inputs:
        yield None, slot, arg, True
    for i, node in enumerate(graph.nodes):
        for j, named in enumerate(node.inputs):
            yield i, j, named.arg, False
        for j, out in enumerate(node.outputs):
            yield i, j, out, True
    for j, arg in enumerate(graph.outputs):
        yield None, j, arg, False


def _definitions(
    graph: schema.Graph, inputs: list[tuple[int, Any]], walk: Callable[[Any], list[Leaf]]
) -> set[str]:
    """Every name the graph's inputs and its nodes' outputs define."""
    names = {leaf.name for _, arg in inputs for leaf in walk(arg) if leaf.name is not None}
    for node in graph.nodes:
        for out in node.outputs:
            names.update(leaf.name for leaf in walk(out) if leaf.name is not None)
    return names


def sym_exprs(graph: schema.Graph, path: str) -> Iterator[tuple[str, str]]:
    """Every SymExpr string a graph's value metadata holds, with a pointer to `expr_str`."""
    for name, meta in graph.tensor_values.items():
        # most metas hold integers only: the pointer is made for the few that hold an expression
        for field, values in (("sizes", meta.sizes), ("strides", meta.strides)):
            for i, value in enumerate(values):
                if type(value) is schema.SymIntAsExpr:
                    where = path + pointer(["tensor_values", name, field, i, "as_expr"])
                    yield value.as_expr.expr_str, f"{where}/expr_str"
        if type(meta.storage_offset) is schema.SymIntAsExpr:
            where = path + pointer(["tensor_values", name, "storage_offset", "as_expr"])
            yield meta.storage_offset.as_expr.expr_str, f"{where}/expr_str"
    tables: tuple[tuple[str, Mapping[str, Any]], ...] = (
        ("sym_int_values", graph.sym_int_values),
        ("sym_bool_values", graph.sym_bool_values),
        ("sym_float_values", graph.sym_float_values),
    )
    for table, entries in tables:
        for name, value in entries.items():
            if isinstance(
                value, schema.SymIntAsExpr | schema.SymBoolAsExpr | schema.SymFloatAsExpr
            ):
                yield value.as_expr.expr_str, path + pointer([table, name, "as_expr", "expr_str"])
