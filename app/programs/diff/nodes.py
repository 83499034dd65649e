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

import hashlib
from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from operator import itemgetter
from typing import Any

from pydantic import BaseModel

from app.archive.tensors import dtype_name
from app.programs.canonical import canonicalize
from app.programs.diff.interface import Symbols, value_desc
from app.programs.diff.models import (
    ArgumentChange,
    GraphDiff,
    NodeChange,
    NodeRef,
    OutputMetaChange,
)
from app.programs.inspect.common import argument_values
from schema.models import (
    Argument,
    ArgumentAsComplex,
    ArgumentAsCustomObj,
    ArgumentAsDevice,
    ArgumentAsGraph,
    ArgumentAsLayout,
    ArgumentAsMemoryFormat,
    ArgumentAsNestedTensors,
    ArgumentAsNone,
    ArgumentAsOptionalTensor,
    ArgumentAsOptionalTensors,
    ArgumentAsScalarType,
    ArgumentAsStringToArgument,
    ArgumentAsSymBool,
    ArgumentAsSymBools,
    ArgumentAsSymFloat,
    ArgumentAsSymFloats,
    ArgumentAsSymInt,
    ArgumentAsSymInts,
    ArgumentAsTensor,
    ArgumentAsTensors,
    ExportedProgram,
    Graph,
    NamedArgument,
    Node,
    OptionalTensorArgumentAsTensor,
    SymIntAsInt,
    TensorMeta,
)

#: An input's identity: ("in", ...) for a graph input, ("node", position, output) for a value
#: a node defines (positions of the old graph), ("?", side, name) for a value nothing defines.
Ref = tuple[Any, ...]

#: How many values a look through added/removed nodes may visit.
_FRONTIER_STEPS = 32
#: How many candidates below what a node reads are scored.
_CANDIDATES = 16
#: How many unpaired old nodes after the same paired node are scored as "changed" partners.
_GAP_CANDIDATES = 4
#: How many unpaired nodes deep candidates are looked for below what a node reads.
_REACH = 4
#: Rounds of propagation and change pairing.
_ROUNDS = 4


# ---------------------------------------------------------------- arguments


def _freeze(value: Any) -> Hashable:
    """A hashable, type-faithful copy of a literal (floats by repr, so NaN equals NaN)."""
    if isinstance(value, BaseModel):
        return (type(value).__name__, tuple((k, _freeze(v)) for k, v in value.__dict__.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _freeze(v)) for k, v in sorted(value.items(), key=itemgetter(0)))
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, IntEnum):
        return int(value)
    assert isinstance(value, Hashable)
    return value


def _sym(item: Any) -> tuple[Hashable, list[str]]:
    if item.kind == "as_name":
        return None, [item.value]
    return _freeze(item.value), []


def _split(arg: Argument) -> tuple[Hashable, list[str]]:
    """An argument's literal skeleton (value references blanked) and the values it reads."""
    if isinstance(arg, ArgumentAsTensor):
        return ("tensor",), [arg.as_tensor.name]
    if isinstance(arg, ArgumentAsTensors):
        return ("tensors", len(arg.as_tensors)), [t.name for t in arg.as_tensors]
    if isinstance(arg, ArgumentAsOptionalTensors):
        items = arg.as_optional_tensors
        present = tuple(isinstance(t, OptionalTensorArgumentAsTensor) for t in items)
        names = [t.as_tensor.name for t in items if isinstance(t, OptionalTensorArgumentAsTensor)]
        return ("optional_tensors", present), names
    if isinstance(arg, ArgumentAsOptionalTensor):
        item = arg.as_optional_tensor
        if isinstance(item, OptionalTensorArgumentAsTensor):
            return ("optional_tensor", True), [item.as_tensor.name]
        return ("optional_tensor", False), []
    if isinstance(arg, ArgumentAsNestedTensors):
        rows = arg.as_nested_tensors
        return ("nested", tuple(len(r) for r in rows)), [t.name for r in rows for t in r]
    if isinstance(arg, ArgumentAsSymInt | ArgumentAsSymFloat | ArgumentAsSymBool):
        skeleton, names = _sym(arg.value)
        return (arg.kind, skeleton), names
    if isinstance(arg, ArgumentAsSymInts | ArgumentAsSymFloats | ArgumentAsSymBools):
        parts = [_sym(item) for item in arg.value]
        return (arg.kind, tuple(s for s, _ in parts)), [n for _, ns in parts for n in ns]
    if isinstance(arg, ArgumentAsCustomObj):
        return ("custom_obj", arg.as_custom_obj.class_fqn), [arg.as_custom_obj.name]
    if isinstance(arg, ArgumentAsStringToArgument):
        keys: list[tuple[str, Hashable]] = []
        values: list[str] = []
        for key, entry in sorted(arg.as_string_to_argument.items(), key=itemgetter(0)):
            entry_skeleton, entry_names = _split(entry)
            keys.append((key, entry_skeleton))
            values.extend(entry_names)
        return ("string_to_argument", tuple(keys)), values
    return (arg.kind, _freeze(arg.value)), []


def render_argument(arg: Argument) -> str:
    """An argument as a reader wants it: value names, and literals in Python spelling."""
    if isinstance(arg, ArgumentAsTensor):
        return arg.as_tensor.name
    if isinstance(arg, ArgumentAsNone):
        return "None"
    if isinstance(arg, ArgumentAsTensors):
        return f"[{', '.join(t.name for t in arg.as_tensors)}]"
    if isinstance(arg, ArgumentAsOptionalTensors):
        return f"[{', '.join(_optional(t) for t in arg.as_optional_tensors)}]"
    if isinstance(arg, ArgumentAsOptionalTensor):
        return _optional(arg.as_optional_tensor)
    if isinstance(arg, ArgumentAsNestedTensors):
        rows = ", ".join(f"[{', '.join(t.name for t in r)}]" for r in arg.as_nested_tensors)
        return f"[{rows}]"
    if isinstance(arg, ArgumentAsSymInt | ArgumentAsSymFloat | ArgumentAsSymBool):
        return _sym_text(arg.value)
    if isinstance(arg, ArgumentAsSymInts | ArgumentAsSymFloats | ArgumentAsSymBools):
        return f"[{', '.join(_sym_text(item) for item in arg.value)}]"
    if isinstance(arg, ArgumentAsScalarType):
        return f"torch.{dtype_name(arg.as_scalar_type)}"
    if isinstance(arg, ArgumentAsMemoryFormat | ArgumentAsLayout):
        return f"torch.{arg.value.name}"
    if isinstance(arg, ArgumentAsDevice):
        index = arg.as_device.index
        return repr(arg.as_device.type if index is None else f"{arg.as_device.type}:{index}")
    if isinstance(arg, ArgumentAsGraph):
        return f"<graph {arg.as_graph.name}>"
    if isinstance(arg, ArgumentAsCustomObj):
        return arg.as_custom_obj.name
    if isinstance(arg, ArgumentAsComplex):
        return f"complex({arg.as_complex.real!r}, {arg.as_complex.imag!r})"
    if isinstance(arg, ArgumentAsStringToArgument):
        items = sorted(arg.as_string_to_argument.items(), key=itemgetter(0))
        return "{" + ", ".join(f"{k!r}: {render_argument(v)}" for k, v in items) + "}"
    return repr(arg.value)


def _optional(item: Any) -> str:
    return item.as_tensor.name if isinstance(item, OptionalTensorArgumentAsTensor) else "None"


def _sym_text(item: Any) -> str:
    return str(item.value) if item.kind == "as_name" else repr(item.value)


def _operator(target: str) -> str:
    """A target without its overload: ``torch.ops.aten.add`` for ``torch.ops.aten.add.Tensor``."""
    parts = target.split(".")
    return ".".join(parts[:4]) if target.startswith("torch.ops.") and len(parts) > 4 else target


# ---------------------------------------------------------------- graphs


@dataclass
class _Arg:
    name: str
    skeleton: Hashable
    values: tuple[str, ...]
    graph: PreparedGraph | None = None


@dataclass
class _Node:
    position: int
    source: Node
    args: tuple[_Arg, ...]
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
    nodes: list[_Node]
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
        args: list[_Arg] = []
        for k, named in enumerate(node.inputs):
            arg = named.arg
            if isinstance(arg, ArgumentAsGraph):
                other = canonical_node.inputs[k].arg
                assert isinstance(other, ArgumentAsGraph)
                sub = arg.as_graph.graph
                sub_inputs: dict[str, Ref] = {
                    v: ("in", "subgraph", m)
                    for m, v in enumerate(n for a in sub.inputs for n in argument_values(a))
                }
                sub_built = build_graph(sub, other.as_graph.graph, arg.as_graph.name, sub_inputs)
                args.append(_Arg(named.name, ("graph", sub_built.merkle), (), sub_built))
            else:
                skeleton, names = _split(arg)
                args.append(_Arg(named.name, skeleton, tuple(names)))
        outputs = tuple(v for out in node.outputs for v in argument_values(out))
        out_skeleton = tuple(_split(out)[0] for out in node.outputs)
        local = (node.target, out_skeleton, tuple((a.name, a.skeleton) for a in args))
        values = tuple(v for a in args for v in a.values)
        item = _Node(index, node, tuple(args), outputs, out_skeleton, local, values)
        item.merkle = _hash((local, tuple(identity(v) for v in item.values)))
        for leaf, value in enumerate(outputs):
            built.producer[value] = (pos, leaf)
        built.nodes.append(item)
    outs = tuple(identity(v) for out in original.outputs for v in argument_values(out))
    built.merkle = _hash((tuple(n.merkle for n in built.nodes), outs, len(inputs)))
    return built


# ---------------------------------------------------------------- alignment


class _Aligner:
    """Pairs the nodes of two graphs (positions are canonical positions)."""

    def __init__(self, old: PreparedGraph, new: PreparedGraph) -> None:
        self.old = old
        self.new = new
        self.o2n: dict[int, int] = {}
        self.n2o: dict[int, int] = {}
        self.old_refs = [tuple(self.old_ref(v) for v in n.values) for n in old.nodes]
        self.old_users: dict[Ref, list[int]] = defaultdict(list)
        for i in range(len(old.nodes)):
            for ref in dict.fromkeys(self.old_refs[i]):
                self.old_users[ref].append(i)
        self.consumers_old = self._consumers(old)
        self.consumers_new = self._consumers(new)
        self._frontiers: dict[tuple[str, str], frozenset[Ref]] = {}

    @staticmethod
    def _consumers(graph: PreparedGraph) -> list[list[int]]:
        found: list[list[int]] = [[] for _ in graph.nodes]
        for pos, node in enumerate(graph.nodes):
            for producer in dict.fromkeys(
                graph.producer[v][0] for v in node.values if v in graph.producer
            ):
                found[producer].append(pos)
        return found

    def pair(self, i: int, j: int) -> None:
        """Record old node i and new node j as the same node."""
        self.o2n[i] = j
        self.n2o[j] = i

    # ------------------------------------------------ references

    def old_ref(self, value: str) -> Ref:
        """An old value's identity in old positions."""
        known = self.old.inputs.get(value)
        if known is not None:
            return known
        made = self.old.producer.get(value)
        return ("?", "old", value) if made is None else ("node", made[0], made[1])

    def new_ref(self, value: str) -> Ref | None:
        """A new value's identity in old positions; None while its producer is unpaired."""
        known = self.new.inputs.get(value)
        if known is not None:
            return known
        made = self.new.producer.get(value)
        if made is None:
            return ("?", "new", value)
        partner = self.n2o.get(made[0])
        return None if partner is None else ("node", partner, made[1])

    def _frontier(
        self, graph: PreparedGraph, value: str, partner: Callable[[int], int | None]
    ) -> frozenset[Ref]:
        """What a value reads, looking through unpaired nodes up to paired ones and inputs."""
        found: set[Ref] = set()
        stack = [value]
        seen: set[str] = set()
        while stack and len(seen) < _FRONTIER_STEPS:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            known = graph.inputs.get(current)
            if known is not None:
                found.add(known)
                continue
            made = graph.producer.get(current)
            if made is None:
                continue
            other = partner(made[0])
            if other is not None:
                found.add(("node", other, made[1]))
            else:
                stack.extend(graph.nodes[made[0]].values)
        return frozenset(found)

    def frontier_old(self, value: str) -> frozenset[Ref]:
        """The old value's frontier, in old positions."""
        return self._memo(
            ("old", value),
            lambda: self._frontier(self.old, value, lambda i: i if i in self.o2n else None),
        )

    def frontier_new(self, value: str) -> frozenset[Ref]:
        """The new value's frontier, in old positions."""
        return self._memo(("new", value), lambda: self._frontier(self.new, value, self.n2o.get))

    def _memo(self, key: tuple[str, str], compute: Callable[[], frozenset[Ref]]) -> frozenset[Ref]:
        # Kept for one round. New-side frontiers stay exact: a round visits new nodes in
        # topological order and pairs only the one it visits, never an ancestor of a value
        # already looked at. An old-side frontier may miss a pair made later in the round;
        # that can only lose a match, which the next round (with a fresh cache) finds.
        found = self._frontiers.get(key)
        if found is None:
            found = self._frontiers[key] = compute()
        return found

    def similarity(self, old_value: str, new_value: str, strict: bool) -> float | None:
        """How well the new value stands where the old one did: 1.0 for the same value,
        less when added or removed nodes lie between; None when it does not.

        Strictly, what one side reads through unpaired nodes must contain what the other
        reads (an insertion or a removal); loosely, they need only overlap.
        """
        ref = self.new_ref(new_value)
        if ref is not None and ref == self.old_ref(old_value):
            return 1.0
        a = self.old.producer.get(old_value)
        b = self.new.producer.get(new_value)
        if a is not None and b is not None and a[1] == b[1]:
            if self.old.nodes[a[0]].merkle == self.new.nodes[b[0]].merkle:
                return 1.0
        old_free = a is not None and a[0] not in self.o2n
        new_free = b is not None and b[0] not in self.n2o
        if not (old_free or new_free):
            return None
        before, after = self.frontier_old(old_value), self.frontier_new(new_value)
        common = before & after
        if not common or (strict and not (before <= after or after <= before)):
            return None
        return len(common) / len(before | after)

    def corresponds(self, old_value: str, new_value: str) -> bool:
        """Whether the new value stands where the old one did (added/removed nodes aside)."""
        return self.similarity(old_value, new_value, strict=False) is not None

    # ------------------------------------------------ rounds

    def align(self) -> None:
        """Pair what can be paired, round after round (see the module docstring)."""
        self._equal_hashes()
        for _ in range(_ROUNDS):
            self._propagate()
            self._propagate(through=True)
            if not self._changed():
                break

    def _equal_hashes(self) -> None:
        waiting: dict[str, deque[int]] = defaultdict(deque)
        for i, node in enumerate(self.old.nodes):
            waiting[node.merkle].append(i)
        for j, node in enumerate(self.new.nodes):
            queue = waiting.get(node.merkle)
            if queue:
                self.pair(queue.popleft(), j)

    def _propagate(self, through: bool = False) -> None:
        self._frontiers.clear()
        for j, node in enumerate(self.new.nodes):
            if j in self.n2o:
                continue
            found = self._exact(node)
            if found is None and through:
                found = self._through(node)
            if found is not None:
                self.pair(found, j)

    def _exact(self, node: _Node) -> int | None:
        refs: list[Ref] = []
        for value in node.values:
            ref = self.new_ref(value)
            if ref is None:
                return None
            refs.append(ref)
        if not refs:
            return None
        wanted = tuple(refs)
        for i in self.old_users.get(refs[0], []):
            if (
                i not in self.o2n
                and self.old.nodes[i].local == node.local
                and self.old_refs[i] == wanted
            ):
                return i
        return None

    def _readers(self, refs: Iterable[Ref]) -> list[int]:
        """Unpaired old nodes that read `refs`, directly or through a few unpaired old nodes."""
        found: dict[int, None] = {}
        level = [i for ref in refs for i in self.old_users.get(ref, ())]
        for _ in range(_REACH):
            following: list[int] = []
            for i in level:
                if i in found or i in self.o2n:
                    continue
                found[i] = None
                following.extend(self.consumers_old[i])
            if not following or len(found) >= _CANDIDATES:
                break
            level = following
        return list(found)[:_CANDIDATES]

    def _reads(self, node: _Node) -> frozenset[Ref]:
        return frozenset(ref for v in node.values for ref in self.frontier_new(v))

    def _through(self, node: _Node) -> int | None:
        best: tuple[tuple[int, float], int] | None = None
        for i in self._readers(self._reads(node)):
            candidate = self.old.nodes[i]
            if candidate.local != node.local:
                continue
            score = self._score(candidate, node)
            if score is not None and (best is None or score > best[0]):
                best = (score, i)
        return None if best is None else best[1]

    def _score(self, old: _Node, new: _Node) -> tuple[int, float] | None:
        exact = 0
        total = 0.0
        for a, b in zip(old.values, new.values, strict=True):
            found = self.similarity(a, b, strict=True)
            if found is None:
                return None
            exact += found == 1.0
            total += found
        return exact, total

    def _changed(self) -> bool:
        """Pair leftovers with the same operator in the same neighbourhood; True if any."""
        self._frontiers.clear()
        anchor_old = self._anchors(len(self.old.nodes), lambda i: i if i in self.o2n else None)
        anchor_new = self._anchors(len(self.new.nodes), self.n2o.get)
        gaps: dict[tuple[int, str], list[int]] = defaultdict(list)
        for i, node in enumerate(self.old.nodes):
            if i not in self.o2n:
                gaps[(anchor_old[i], _operator(node.source.target))].append(i)
        paired = False
        for j, node in enumerate(self.new.nodes):
            if j in self.n2o:
                continue
            target = _operator(node.source.target)
            candidates = dict.fromkeys(
                [
                    *self._readers(self._reads(node)),
                    *self._feeders(j),
                    *[i for i in gaps.get((anchor_new[j], target), ()) if i not in self.o2n][
                        :_GAP_CANDIDATES
                    ],
                ]
            )
            best: tuple[int, int] | None = None
            for i in candidates:
                if i in self.o2n or _operator(self.old.nodes[i].source.target) != target:
                    continue
                score = self._neighbourhood(i, j) + (anchor_old[i] == anchor_new[j])
                if score and (best is None or score > best[0]):
                    best = (score, i)
            if best is not None:
                self.pair(best[1], j)
                paired = True
        return paired

    def _feeders(self, j: int) -> list[int]:
        """Unpaired old nodes feeding the partners of new node j's users."""
        found: list[int] = []
        for user in self.consumers_new[j]:
            partner = self.n2o.get(user)
            if partner is None:
                continue
            for value in self.old.nodes[partner].values:
                made = self.old.producer.get(value)
                if made is not None and made[0] not in self.o2n:
                    found.append(made[0])
        return found

    @staticmethod
    def _anchors(count: int, partner: Callable[[int], int | None]) -> list[int]:
        """For each position, the old position of the nearest paired node before it (-1)."""
        found: list[int] = []
        last = -1
        for pos in range(count):
            found.append(last)
            other = partner(pos)
            if other is not None:
                last = other
        return found

    def _neighbourhood(self, i: int, j: int) -> int:
        old, new = self.old.nodes[i], self.new.nodes[j]
        inputs = sum(self.corresponds(a, b) for a, b in zip(old.values, new.values, strict=False))
        new_users = set(self.consumers_new[j])
        users = sum(self.o2n.get(u) in new_users for u in self.consumers_old[i])
        return inputs + users


# ---------------------------------------------------------------- report


@dataclass(frozen=True)
class Sides:
    """The shape symbols of each program, to compare node outputs' metadata."""

    old_symbols: Symbols
    new_symbols: Symbols


def diff_graphs(old: PreparedGraph, new: PreparedGraph, sides: Sides) -> GraphDiff:
    """Align two built graphs and report what was added, removed and changed."""
    aligner = _Aligner(old, new)
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


def _classify(aligner: _Aligner, i: int, j: int, sides: Sides) -> NodeChange | None:
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
    aligner: _Aligner, old: _Node, new: _Node, sides: Sides
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
