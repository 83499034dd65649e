"""Structural alignment of the nodes of two graphs.

Both graphs are put in torch's canonical node order first (`canonicalize`, which also refuses
graphs that are not well formed). Each node gets a structural hash: its operator, its literal
arguments and the identity of every value it reads, where a value's identity is the hash of
the node producing it (and which output it is) or the graph input it is (user input name,
weight FQN, subgraph input position). Names never enter a hash, so renaming changes nothing.

Pairs are then found in rounds, each only among nodes still unpaired:

1. equal hashes (the whole upstream computation is identical), greedily in canonical order;
2. propagation in topological order: same operator and literals, and every input read from
   the partner of the other side's input (or the same graph input);
3. the same, looking through added and removed nodes: an input that comes from an unpaired
   node matches when what it reads through unpaired nodes (up to the nearest paired values
   and graph inputs) contains what the other side's input reads, or the reverse; the best
   of the candidates a few steps below those values wins. So a node inserted early does not
   unpair everything after it;
4. "changed": the same operator (overloads aside) in the same neighbourhood (an input or a
   user in common, or right after the same paired node), paired even though the overload,
   literal arguments or inputs differ;

then 2 to 4 again, since new pairs let later nodes propagate. A pair is reported changed
when its target, a literal argument or an output's dtype or shape differs, when a subgraph
differs, or when an input is read from somewhere that neither the pairing nor an added or
removed node explains. Unpaired nodes are added or removed. Subgraphs of higher-order
operators are aligned the same way when the nodes holding them pair up.

Every round is linear in the nodes: candidate scans are bounded (a few unpaired nodes below
what a node reads, a few right after the same paired node), and so are looks through
unpaired nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.programs.diff.align import Aligner
from app.programs.diff.arguments import render_argument
from app.programs.diff.models import ArgumentChange, GraphDiff, NodeChange, OutputMetaChange
from app.programs.diff.prepared import PreparedGraph, PreparedNode
from app.programs.diff.symbols import Symbols, value_desc
from schema.models import SymIntAsInt, TensorMeta


@dataclass(frozen=True)
class Sides:
    """The shape symbols of each program, to compare node outputs' metadata."""

    old_symbols: Symbols
    new_symbols: Symbols


def diff_graphs(old: PreparedGraph, new: PreparedGraph, sides: Sides) -> GraphDiff:
    """Align two built graphs and report what was added, removed and changed."""
    aligner = Aligner(old, new)
    aligner.align()
    changed: list[NodeChange] = []
    for j in sorted(aligner.n2o, key=lambda j: new.nodes[j].position):
        change = _classify(aligner, aligner.n2o[j], j, sides)
        if change is not None:
            changed.append(change)
    return GraphDiff(
        name=new.name,
        old_nodes=len(old.nodes),
        new_nodes=len(new.nodes),
        unchanged=len(aligner.n2o) - len(changed),
        added=sorted(
            (n.ref() for j, n in enumerate(new.nodes) if j not in aligner.n2o),
            key=lambda r: r.position,
        ),
        removed=sorted(
            (n.ref() for i, n in enumerate(old.nodes) if i not in aligner.o2n),
            key=lambda r: r.position,
        ),
        changed=changed,
    )


def _classify(aligner: Aligner, i: int, j: int, sides: Sides) -> NodeChange | None:
    old, new = aligner.old.nodes[i], aligner.new.nodes[j]
    arguments: list[ArgumentChange] = []
    subgraphs: list[GraphDiff] = []
    for pos in range(max(len(old.args), len(new.args))):
        a = old.args[pos] if pos < len(old.args) else None
        b = new.args[pos] if pos < len(new.args) else None
        if a is not None and b is not None and a.graph is not None and b.graph is not None:
            if a.graph.merkle != b.graph.merkle:
                subgraphs.append(diff_graphs(a.graph, b.graph, sides))
            continue
        if (
            a is not None
            and b is not None
            and a.name == b.name
            and a.skeleton == b.skeleton
            and all(aligner.corresponds(x, y) for x, y in zip(a.values, b.values, strict=True))
        ):
            continue
        named = b if b is not None else a
        assert named is not None
        arguments.append(
            ArgumentChange(
                position=pos,
                name=named.name,
                old=None if a is None else render_argument(old.source.inputs[pos].arg),
                new=None if b is None else render_argument(new.source.inputs[pos].arg),
            )
        )
    outputs = _output_changes(aligner, old, new, sides)
    target_changed = old.source.target != new.source.target
    if not (target_changed or arguments or outputs or subgraphs):
        return None
    return NodeChange(
        old=old.ref(),
        new=new.ref(),
        target_changed=target_changed,
        arguments=arguments,
        outputs=outputs,
        subgraphs=subgraphs,
    )


def _output_changes(
    aligner: Aligner, old: PreparedNode, new: PreparedNode, sides: Sides
) -> list[OutputMetaChange]:
    if old.out_skeleton != new.out_skeleton:
        return [
            OutputMetaChange(
                position=0,
                old=", ".join(render_argument(o) for o in old.source.outputs),
                new=", ".join(render_argument(o) for o in new.source.outputs),
            )
        ]
    found: list[OutputMetaChange] = []
    old_graph, new_graph = aligner.old.source, aligner.new.source
    for pos, (a, b) in enumerate(zip(old.outputs, new.outputs, strict=True)):
        meta_a, meta_b = old_graph.tensor_values.get(a), new_graph.tensor_values.get(b)
        if meta_a is not None and meta_b is not None and _meta_key(meta_a) == _meta_key(meta_b):
            continue
        desc_a = value_desc(old_graph, a, sides.old_symbols)
        desc_b = value_desc(new_graph, b, sides.new_symbols)
        key_a = None if desc_a is None else desc_a.key()
        key_b = None if desc_b is None else desc_b.key()
        if key_a != key_b:
            found.append(
                OutputMetaChange(
                    position=pos,
                    old=None if desc_a is None else desc_a.text(),
                    new=None if desc_b is None else desc_b.text(),
                )
            )
    return found


def _meta_key(meta: TensorMeta) -> tuple[object, ...]:
    """dtype, device and sizes as written: equal keys need no symbol-aware comparison."""
    sizes = tuple(
        s.as_int if isinstance(s, SymIntAsInt) else s.as_expr.expr_str for s in meta.sizes
    )
    return (meta.dtype, meta.device.type, meta.device.index, sizes)
