"""Graphs prepared for alignment: nodes in torch's canonical order, each with a structural
hash of its operator, literals and the identity of every value it reads (names never enter a
hash, so renaming changes nothing)."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from app.programs.canonical import canonicalize
from app.programs.diff.arguments import split_argument
from app.programs.diff.models import NodeRef
from app.programs.graph import values as value_names
from schema.models import ArgumentAsGraph, ExportedProgram, Graph, NamedArgument, Node

#: An input's identity: ("in", ...) for a graph input, ("node", position, output) for a value
#: a node defines (positions of the old graph), ("?", side, name) for a value nothing defines.
Ref = tuple[Any, ...]


@dataclass
class PreparedArg:
    """One input of a node: its skeleton, the values it reads, or the subgraph it is."""

    name: str
    skeleton: Hashable
    values: tuple[str, ...]
    graph: PreparedGraph | None = None


@dataclass
class PreparedNode:
    """A node in canonical order, with what alignment compares of it."""

    position: int
    source: Node
    args: tuple[PreparedArg, ...]
    outputs: tuple[str, ...]
    out_skeleton: Hashable
    local: Hashable
    #: every value the node reads, argument by argument.
    values: tuple[str, ...] = ()
    merkle: str = ""

    def ref(self) -> NodeRef:
        """How the report names this node."""
        return NodeRef(
            target=self.source.target, outputs=list(self.outputs), position=self.position
        )


@dataclass
class PreparedGraph:
    """A graph's nodes in canonical order with their hashes, ready to be aligned."""

    name: str
    source: Graph
    nodes: list[PreparedNode]
    inputs: dict[str, Ref]
    producer: dict[str, tuple[int, int]] = field(default_factory=dict)
    merkle: str = ""


def _hash(value: object) -> str:
    return hashlib.blake2b(repr(value).encode(), digest_size=16).hexdigest()


def _tagged(graph: Graph) -> Graph:
    """A copy of `graph` whose nodes (subgraphs included) are named by their position.

    canonicalize keeps node names as they are, so the names of its output say which original
    node each canonical node is.
    """
    nodes = []
    for i, node in enumerate(graph.nodes):
        inputs = node.inputs
        if any(isinstance(a.arg, ArgumentAsGraph) for a in inputs):
            inputs = [_tagged_input(a) for a in inputs]
        nodes.append(node.model_copy(update={"name": str(i), "inputs": inputs}))
    return graph.model_copy(update={"nodes": nodes})


def _tagged_input(named: NamedArgument) -> NamedArgument:
    arg = named.arg
    if not isinstance(arg, ArgumentAsGraph):
        return named
    sub = arg.as_graph.model_copy(update={"graph": _tagged(arg.as_graph.graph)})
    return named.model_copy(update={"arg": ArgumentAsGraph(as_graph=sub)})


def canonical_graph(doc: ExportedProgram) -> Graph:
    """The canonical form of the document's graph, its nodes named by original position."""
    gm = doc.graph_module
    tagged = doc.model_copy(
        update={"graph_module": gm.model_copy(update={"graph": _tagged(gm.graph)})}
    )
    return canonicalize(tagged).graph_module.graph


def build_graph(
    original: Graph, canonical: Graph, name: str, inputs: dict[str, Ref]
) -> PreparedGraph:
    """Nodes of `original` in canonical order with their structural hashes (recursively)."""
    built = PreparedGraph(name, original, [], inputs)

    def identity(value: str) -> Ref:
        known = inputs.get(value)
        if known is not None:
            return known
        made = built.producer.get(value)
        if made is None:
            return ("?", value)
        return ("node", built.nodes[made[0]].merkle, made[1])

    for pos, canonical_node in enumerate(canonical.nodes):
        assert canonical_node.name is not None
        index = int(canonical_node.name)
        node = original.nodes[index]
        args: list[PreparedArg] = []
        for k, named in enumerate(node.inputs):
            arg = named.arg
            if isinstance(arg, ArgumentAsGraph):
                other = canonical_node.inputs[k].arg
                assert isinstance(other, ArgumentAsGraph)
                sub = arg.as_graph.graph
                sub_inputs: dict[str, Ref] = {
                    v: ("in", "subgraph", m)
                    for m, v in enumerate(n for a in sub.inputs for n in value_names(a))
                }
                sub_built = build_graph(sub, other.as_graph.graph, arg.as_graph.name, sub_inputs)
                args.append(PreparedArg(named.name, ("graph", sub_built.merkle), (), sub_built))
            else:
                skeleton, names = split_argument(arg)
                args.append(PreparedArg(named.name, skeleton, tuple(names)))
        outputs = tuple(v for out in node.outputs for v in value_names(out))
        out_skeleton = tuple(split_argument(out)[0] for out in node.outputs)
        local = (node.target, out_skeleton, tuple((a.name, a.skeleton) for a in args))
        values = tuple(v for a in args for v in a.values)
        item = PreparedNode(index, node, tuple(args), outputs, out_skeleton, local, values)
        item.merkle = _hash((local, tuple(identity(v) for v in item.values)))
        for leaf, value in enumerate(outputs):
            built.producer[value] = (pos, leaf)
        built.nodes.append(item)
    outs = tuple(identity(v) for out in original.outputs for v in value_names(out))
    built.merkle = _hash((tuple(n.merkle for n in built.nodes), outs, len(inputs)))
    return built
