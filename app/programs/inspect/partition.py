"""Capability-based partitions of a document's graph, as torch's partitioner proposes them.

``partitions`` answers what ``CapabilityBasedPartitioner(gm, support,
allows_single_node_partition=...).propose_partitions()``
(torch/fx/passes/infra/partitioner.py) answers on the program ``torch.export.load`` rebuilds
from the document, where a node is supported when it is a ``call_function`` whose target (or
its namespace) is in the supported set.

Partitioning works on the FX graph the deserializer builds, not on the document's nodes: one
placeholder per graph input, a ``get_attr`` node before a higher-order operator for each
subgraph it takes, one ``operator.getitem`` node per output of a multi-output node (named after
that output, so unused outputs get one too), and one ``output`` node. Node names are the FX
names: a node's ``name`` field, else its single output's name.

The proposal is torch's greedy walk: nodes in reverse order; a supported node starts a
partition; after each node every partition is offered, in creation order, to a merge with the
first one that does not create a cycle through an unsupported node, the smaller merged into
the larger. Cycles are found from partition-level reachability as torch records it, including
its reachability sets that keep the ids of partitions merged away since. Afterwards ``getitem``
nodes follow their producer's partition, and (unless single-node partitions are allowed)
partitions with at most one compute node are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field

from app.programs.graph import values as value_names
from app.programs.inspect.common import (
    InspectFailure,
    check_defined,
    graph_outputs,
    node_inputs,
    subgraph_arguments,
    target_namespace,
)
from app.programs.inspect.models import Partition
from schema.models import (
    ArgumentAsNone,
    ArgumentAsSymBool,
    ArgumentAsSymFloat,
    ArgumentAsSymInt,
    ArgumentAsTensor,
    ExportedProgram,
    InputSpecConstantInput,
    InputSpecUserInput,
    Node,
)

GETITEM = "_operator.getitem"
_ILLEGAL = re.compile(r"[^0-9a-zA-Z_]+")
_SUFFIX = re.compile(r"(.*)_(\d+)")
#: What torch's partitioner counts as no compute when it drops single-node partitions.
_NON_COMPUTE = frozenset({"torch.ops.aten.view", GETITEM})
#: Beyond this many FX nodes the reachability bookkeeping gets too large to hold.
MAX_PARTITION_NODES = 100_000


@dataclass
class _FxNode:
    name: str
    op: str
    target: str
    inputs: list[int] = field(default_factory=list)
    users: list[int] = field(default_factory=list)


class _FxGraph:
    """The node list torch's deserializer would build, with inputs and users by index."""

    def __init__(self) -> None:
        self.nodes: list[_FxNode] = []
        self.taken: set[str] = set()
        self.counts: dict[str, int] = {}
        self.value: dict[str, int] = {}

    def unique(self, name: str) -> str:
        """FX's rule: a taken ``base`` or ``base_N`` becomes ``base_M`` with the next free M."""
        candidate = _ILLEGAL.sub("_", name) or "_unnamed"
        if candidate[0].isdigit():
            candidate = f"_{candidate}"
        match = _SUFFIX.fullmatch(candidate)
        base, num = (match.group(1), int(match.group(2))) if match else (candidate, 0)
        if not num:
            num = self.counts.get(base, 0)
        while candidate in self.taken:
            num += 1
            candidate = f"{base}_{num}"
        self.taken.add(candidate)
        self.counts[base] = num
        return candidate

    def add(self, name: str, op: str, target: str, reads: Collection[int] = ()) -> int:
        unique = self.unique(name)
        index = len(self.nodes)
        self.nodes.append(_FxNode(unique, op, target))
        for producer in dict.fromkeys(reads):
            self.nodes[index].inputs.append(producer)
            self.nodes[producer].users.append(index)
        return index


def _fx_graph(doc: ExportedProgram) -> _FxGraph:
    graph = doc.graph_module.graph
    fx = _FxGraph()
    specs = doc.graph_module.signature.input_specs
    for i, arg in enumerate(graph.inputs):
        names = value_names(arg)
        if names:
            fx.value[names[0]] = fx.add(names[0], "placeholder", names[0])
            continue
        spec = specs[i] if i < len(specs) else None
        name = f"arg{i}"
        if isinstance(spec, InputSpecConstantInput):
            name = spec.constant_input.name
        elif isinstance(spec, InputSpecUserInput):
            name = next(iter(value_names(spec.user_input.arg)), name)
        fx.add(name, "placeholder", name)
    for node in graph.nodes:
        _add_node(fx, node)
    fx.add("output", "output", "output", [fx.value[n] for n in graph_outputs(graph)])
    return fx


def _auto_name(target: str) -> str:
    """The name FX gives a call of ``target`` when none is asked for."""
    if target.startswith("torch.ops."):
        return "_".join(target.split(".")[3:])
    return target.rsplit(".", 1)[-1]


def _add_node(fx: _FxGraph, node: Node) -> None:
    reads = [fx.add(sub.name, "get_attr", sub.name) for sub in subgraph_arguments(node)]
    reads += [fx.value[name] for name in node_inputs(node)]
    outputs = node.outputs
    single = len(outputs) == 1
    no_value = single and isinstance(outputs[0], ArgumentAsNone)
    # A higher-order operator's lone output is a one-element tuple unless the node says it
    # returns a bare tensor; torch reads an absent flag the same way as False.
    hop_tuple = (
        node.target.startswith("torch.ops.higher_order.")
        and single
        and not node.is_hop_single_tensor_return
        and not no_value
    )
    own_value = (
        single
        and not hop_tuple
        and isinstance(
            outputs[0], ArgumentAsTensor | ArgumentAsSymInt | ArgumentAsSymFloat | ArgumentAsSymBool
        )
    )
    values = value_names(outputs[0]) if own_value else []
    if no_value:
        name = f"{_auto_name(node.target)}_unused"
    elif node.name:
        name = node.name
    else:
        name = values[0] if values else _auto_name(node.target)
    index = fx.add(name, "call_function", node.target, reads)
    if own_value:
        for value in values:
            fx.value[value] = index
    elif hop_tuple:
        _add_getitems(fx, index, [outputs[0]])
    elif single and isinstance(outputs[0].value, list):
        _add_getitems(fx, index, list(outputs[0].value))
    elif not single:
        _add_getitems(fx, index, list(outputs))


def _add_getitems(fx: _FxGraph, producer: int, items: list[object]) -> None:
    for item in items:
        if isinstance(item, ArgumentAsNone):
            fx.add("as_none", "call_function", GETITEM, [producer])
            continue
        value = getattr(item, "value", None)
        if isinstance(value, list):
            holder = fx.add("getitem", "call_function", GETITEM, [producer])
            _add_getitems(fx, holder, list(value))
            continue
        names = _item_names(item)
        if names:
            fx.value[names[0]] = fx.add(names[0], "call_function", GETITEM, [producer])


def _item_names(item: object) -> list[str]:
    for attribute in ("name", "as_name"):
        name = getattr(item, attribute, None)
        if isinstance(name, str):
            return [name]
    value = getattr(item, "value", None)
    if value is not None and value is not item:
        return _item_names(value)
    return []


def _is_supported(target: str, supported: Collection[str]) -> bool:
    if target in supported or target_namespace(target) in supported:
        return True
    short = target.removeprefix("torch.ops.")
    return (
        short in supported
        or short.rsplit(".", 1)[0] in supported
        or (target.startswith("torch.ops.") and target.rsplit(".", 1)[0] in supported)
    )


class _Proposal:
    """torch's greedy merge walk over one FX graph, with union-find over partition ids."""

    def __init__(self, fx: _FxGraph, supported: Collection[str]) -> None:
        self.fx = fx
        self.supported = [
            n.op == "call_function" and _is_supported(n.target, supported) for n in fx.nodes
        ]
        self.created: list[int | None] = [None] * len(fx.nodes)
        self.parent: dict[int, int] = {}
        self.members: dict[int, list[int]] = {}
        self.order: dict[int, int] = {}
        self.downstream: dict[int, set[int]] = {}
        self.users: dict[int, set[int]] = {}
        self.reach: list[set[int]] = [set() for _ in fx.nodes]
        self.merges = 0
        self.refused: dict[tuple[int, int], int] = {}
        self.reached_by_users: dict[int, tuple[int, set[int]]] = {}

    def find(self, pid: int) -> int:
        root = pid
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[pid] != root:
            self.parent[pid], pid = root, self.parent[pid]
        return root

    def partition_of(self, node: int) -> int | None:
        created = self.created[node]
        return None if created is None else self.find(created)

    def reached(self, nodes: Collection[int]) -> set[int]:
        """Partitions that hold any of ``nodes`` or anything downstream of them."""
        return {self.find(pid) for node in nodes for pid in self.reach[node]}

    def outside(self, pid: int, other: int) -> set[int]:
        """Users of partition ``pid`` (never its own nodes) that are not in ``other``."""
        users = self.users[pid]
        members = self.members[other]
        if len(members) < len(users) and not any(m in users for m in members):
            return users
        return {u for u in users if self.partition_of(u) != other}

    def reached_from(self, pid: int, users: set[int]) -> set[int]:
        """`reached` for users of ``pid``, remembered until the next merge when they are all."""
        if users is not self.users[pid]:
            return self.reached(users)
        known = self.reached_by_users.get(pid)
        if known is None or known[0] != self.merges:
            known = (self.merges, self.reached(users))
            self.reached_by_users[pid] = known
        return known[1]

    def downstream_of(self, nodes: Collection[int], exclude: Collection[int]) -> set[int]:
        found: set[int] = set()
        for pid in self.reached(nodes):
            found.add(pid)
            found.update(self.downstream[pid])
        return found.difference(exclude)

    def run(self) -> None:
        pids = 0
        for index in reversed(range(len(self.fx.nodes))):
            node = self.fx.nodes[index]
            candidates: dict[int, None] = {}
            below = self.reached(node.users)
            if self.supported[index]:
                pid = pids
                pids += 1
                self.created[index] = pid
                self.parent[pid] = pid
                self.members[pid] = [index]
                self.order[pid] = pid
                self.users[pid] = set(node.users)
                self.downstream[pid] = self.downstream_of(node.users, (pid,))
                below.add(pid)
                candidates[pid] = None
            self.reach[index] = below
            for pid in sorted(self.order, key=self.order.__getitem__):
                candidates.setdefault(pid, None)
            ids = list(candidates)
            if len(ids) > 1:
                keep = ids[0]
                for other in ids[1:]:
                    keep = self.merge(keep, other)

    def merge(self, a: int, b: int) -> int:
        # Only a merge changes what a merge check sees: a partition created since sits
        # upstream of every node already walked, so no refused pair's users can reach it.
        if self.refused.get((a, b)) == self.merges:
            return a
        users_a, users_b = self.outside(a, b), self.outside(b, a)
        for users, pid_users in ((users_a, a), (users_b, b)):
            for pid in self.reached_from(pid_users, users):
                if pid in (a, b) or a in self.downstream[pid] or b in self.downstream[pid]:
                    self.refused[(a, b)] = self.merges
                    return a
        users = users_a | users_b
        self.merges += 1
        keep, drop = (b, a) if len(self.members[a]) < len(self.members[b]) else (a, b)
        self.members[keep].extend(self.members.pop(drop))
        self.parent[drop] = keep
        self.order[keep] = min(self.order[keep], self.order.pop(drop))
        self.downstream[keep] |= self.downstream.pop(drop)
        self.users[keep] = users
        del self.users[drop]
        self.downstream[keep] |= self.downstream_of(users, (keep, drop))
        self.downstream[keep].difference_update((keep, drop))
        return keep

    def assignment(self) -> dict[int, int | None]:
        return {i: self.partition_of(i) for i in range(len(self.fx.nodes))}


def partitions(
    doc: ExportedProgram,
    supported: Collection[str],
    allow_single_node: bool = False,
    max_nodes: int = MAX_PARTITION_NODES,
) -> list[Partition]:
    """The maximal groups of supported nodes that run as one unit without a cycle through an
    unsupported node, as torch's CapabilityBasedPartitioner proposes them.

    ``supported`` holds operator targets (``torch.ops.aten.linear.default``, also without the
    ``torch.ops.`` prefix or the overload) or whole namespaces (``aten``, ``_operator``).
    """
    if not supported:
        raise InspectFailure(
            "supported-missing",
            "partitions are proposed for a set of supported operators: name targets or "
            "namespaces (--supported aten.linear aten.relu, or ?supported=aten)",
        )
    check_defined(doc.graph_module.graph, "/graph_module/graph")
    fx = _fx_graph(doc)
    if len(fx.nodes) > max_nodes:
        raise InspectFailure(
            "graph-too-large",
            f"{len(fx.nodes)} FX nodes exceed the partitioning limit of {max_nodes}",
        )
    proposal = _Proposal(fx, supported)
    proposal.run()
    assigned = proposal.assignment()

    while True:
        moves: dict[int, int | None] = {}
        for index, node in enumerate(fx.nodes):
            if all(fx.nodes[u].target == GETITEM for u in node.users):
                for user in node.users:
                    if assigned[user] != assigned[index]:
                        moves[user] = assigned[index]
        if not moves:
            break
        assigned.update(moves)

    groups: dict[int, list[int]] = {}
    for index, pid in assigned.items():
        if pid is not None:
            groups.setdefault(pid, []).append(index)
    result: list[Partition] = []
    for members in sorted(groups.values()):
        compute = sum(1 for i in members if fx.nodes[i].target not in _NON_COMPUTE)
        if compute <= 1 and not allow_single_node:
            continue
        result.append(_describe(fx, members))
    return result


def _describe(fx: _FxGraph, members: list[int]) -> Partition:
    inside = set(members)
    inputs: dict[str, None] = {}
    outputs: dict[str, None] = {}
    for i in members:
        node = fx.nodes[i]
        for producer in node.inputs:
            if producer not in inside:
                inputs[fx.nodes[producer].name] = None
        if any(user not in inside for user in node.users):
            outputs[node.name] = None
    return Partition(
        nodes=[fx.nodes[i].name for i in members], inputs=list(inputs), outputs=list(outputs)
    )
