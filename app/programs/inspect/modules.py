"""The module hierarchy of a program, its module-level dataflow, and pipeline stages.

The hierarchy is the one ``torch.export.unflatten`` rebuilds (torch/export/unflatten.py): a
module for every path of the module call graph, of the nodes' ``nn_module_stack`` metadata and
of the weights' dotted names, plus each higher-order operator's subgraphs as attributes of the
module that calls the operator. Repeated calls of a module (``sub``, ``sub@1``) are one module
with ``calls == 2``; unflatten keeps a second module ``sub@1`` only when the two calls trace to
different graphs, which this view does not tell apart. A module that no node calls has no type,
except that nodes inside subgraphs still name the type of the modules they run in.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from app.programs.graph import values as value_names
from app.programs.inspect.common import (
    NODES_POINTER,
    InspectFailure,
    StackEntry,
    WeightInfo,
    check_defined,
    custom_objects,
    graph_inputs,
    graph_outputs,
    graph_stacks,
    graph_weights,
    meta_numel_bytes,
    node_inputs,
    node_outputs,
    parent_path,
    subgraph_inputs,
)
from app.programs.inspect.models import (
    CallSignature,
    Edge,
    ModuleGraph,
    ModuleInfo,
    ModuleTree,
    Stage,
    Tally,
    Vertex,
)
from schema.io import no_cycle_collection
from schema.models import (
    Argument,
    ArgumentAsBool,
    ArgumentAsFloat,
    ArgumentAsInt,
    ArgumentAsNone,
    ArgumentAsString,
    ExportedProgram,
    Graph,
    ModuleCallEntry,
)

INPUT = "<input>"
OUTPUT = "<output>"
#: The id of the root module's vertex (its own nodes), whose path is "".
ROOT = "<root>"

StageCost = Literal["param_bytes", "nodes"]

#: Dotted parts a module path may have: every prefix becomes a module, so the work grows with
#: the square of this.
MAX_MODULE_DEPTH = 1000

_KINDS = ("parameter", "buffer", "constant")


@dataclass
class _Module:
    path: str
    kind: Literal["module", "subgraph"] = "module"
    type: str | None = None
    calls: set[int] = field(default_factory=set)
    nodes: int = 0
    weights: dict[str, Tally] = field(default_factory=lambda: {k: Tally() for k in _KINDS})
    signatures: list[CallSignature] = field(default_factory=list)


class _Hierarchy:
    """Modules in the order they are first met, and every module's ancestors."""

    def __init__(self) -> None:
        self.modules: dict[str, _Module] = {"": _Module("")}

    def touch(self, path: str, kind: Literal["module", "subgraph"] = "module") -> _Module:
        if path not in self.modules:
            parts = path.split(".")
            if len(parts) > MAX_MODULE_DEPTH:
                raise InspectFailure(
                    "module-too-deep",
                    f"module path {path[:80]!r}... has {len(parts)} parts, more than "
                    f"{MAX_MODULE_DEPTH}",
                )
            for end in range(1, len(parts)):
                prefix = ".".join(parts[:end])
                self.modules.setdefault(prefix, _Module(prefix))
            self.modules[path] = _Module(path, kind)
        return self.modules[path]


def _weight_tally(sizes: tuple[int, int] | None) -> Tally:
    if sizes is None:
        return Tally(count=1, unknown=1)
    numel, nbytes = sizes
    return Tally(count=1, numel=numel, nbytes=nbytes)


def _manifest_tally(info: WeightInfo) -> Tally:
    numel = 1
    for dim in info.shape:
        numel *= dim
    return Tally(count=1, numel=numel, nbytes=info.nbytes)


def _label(arg: Argument) -> str:
    """A signature entry: the value's name, a literal's Python spelling, else ``<arm>``."""
    names = value_names(arg)
    if len(names) == 1:
        return names[0]
    if isinstance(arg, ArgumentAsNone):
        return "None"
    if isinstance(arg, ArgumentAsInt | ArgumentAsFloat | ArgumentAsBool | ArgumentAsString):
        return repr(arg.value)
    return f"<{arg.kind}>"


def _signature(entry: ModuleCallEntry) -> CallSignature | None:
    sig = entry.signature
    if sig is None:
        return None
    return CallSignature(
        call=entry.fqn,
        inputs=[_label(a) for a in sig.inputs],
        outputs=[_label(a) for a in sig.outputs],
        in_spec=sig.in_spec,
        out_spec=sig.out_spec,
        forward_arg_names=sig.forward_arg_names,
    )


def module_tree(doc: ExportedProgram, weights: Sequence[WeightInfo] | None = None) -> ModuleTree:
    """The module hierarchy ``torch.export.unflatten`` would rebuild, with sizes and calls."""
    with no_cycle_collection():
        return _module_tree(doc, weights)


def _module_tree(doc: ExportedProgram, weights: Sequence[WeightInfo] | None) -> ModuleTree:
    gm = doc.graph_module
    graph = gm.graph
    tree = _Hierarchy()
    root = tree.modules[""]
    root.calls.add(0)

    stacks = graph_stacks(graph, NODES_POINTER)
    # nodes of one module call share their stack: each stack is entered once, then counted
    counts = Counter(id(stack) for stack in stacks)
    for stack in {id(stack): stack for stack in stacks}.values():
        if stack[0].type and root.type is None:
            root.type = stack[0].type
        _enter(tree, stack)
        tree.modules[stack[-1].path].nodes += counts[id(stack)]

    for i, (node, stack) in enumerate(zip(graph.nodes, stacks, strict=True)):
        owner = stack[-1].path
        for j, sub in subgraph_inputs(node):
            path = f"{owner}.{sub.name}" if owner else sub.name
            _add_subgraph(tree, path, sub.graph, _subgraph_pointer(NODES_POINTER, i, j))

    named = {info.name: info for info in weights or ()}
    #: (module of a tied weight, module of the weight it shares storage with, kind, its tally)
    ties: list[tuple[str, str, str, Tally]] = []
    for weight in graph_weights(doc):
        module = tree.touch(parent_path(weight.name))
        if weight.name in named:
            tally = _manifest_tally(named[weight.name])
        else:
            tally = _weight_tally(meta_numel_bytes(weight.meta))
        module.weights[weight.kind] = module.weights[weight.kind].add(tally)
        tied_to = named[weight.name].tied_to if weight.name in named else None
        if tied_to is not None:
            ties.append((module.path, parent_path(tied_to), weight.kind, tally))
    in_signature = {w.name for w in graph_weights(doc)}
    for info in weights or ():
        if info.name not in in_signature:
            module = tree.touch(parent_path(info.name))
            module.weights[info.kind] = module.weights[info.kind].add(_manifest_tally(info))
            if info.tied_to is not None:
                ties.append(
                    (module.path, parent_path(info.tied_to), info.kind, _manifest_tally(info))
                )
    for name in custom_objects(doc):
        tree.touch(parent_path(name))

    mcg_order: dict[str, int] = {}
    for call_entry in gm.module_call_graph:
        base, _, call = call_entry.fqn.partition("@")
        module = tree.touch(base)
        if not call:
            mcg_order.setdefault(base, len(mcg_order))
        signature = _signature(call_entry)
        if signature is not None:
            module.signatures.append(signature)
            if base:
                module.calls.add(int(call) if call.isdigit() else 0)

    return _assemble(tree, mcg_order, ties)


def _common_ancestor(a: str, b: str) -> str:
    """The deepest module path both dotted paths are in (``""``, the root, at least)."""
    common: list[str] = []
    for x, y in zip(a.split(".") if a else [], b.split(".") if b else [], strict=False):
        if x != y:
            break
        common.append(x)
    return ".".join(common)


def _enter(tree: _Hierarchy, stack: list[StackEntry]) -> None:
    """Every module call of a stack (the root's aside) made known to the tree."""
    for entry in stack[1:]:
        module = tree.touch(entry.path)
        module.type = module.type or entry.type
        module.calls.add(entry.call)


def _subgraph_pointer(nodes: str, node: int, arg: int) -> str:
    return f"{nodes}/{node}/inputs/{arg}/arg/as_graph/graph/nodes"


def _add_subgraph(tree: _Hierarchy, path: str, graph: Graph, pointer: str) -> None:
    module = tree.touch(path, "subgraph")
    module.nodes = len(graph.nodes)
    for stack in {id(stack): stack for stack in graph_stacks(graph, pointer)}.values():
        _enter(tree, stack)
    for i, node in enumerate(graph.nodes):
        for j, sub in subgraph_inputs(node):
            _add_subgraph(tree, f"{path}.{sub.name}", sub.graph, _subgraph_pointer(pointer, i, j))


def _assemble(
    tree: _Hierarchy, mcg_order: dict[str, int], ties: list[tuple[str, str, str, Tally]]
) -> ModuleTree:
    met = {path: i for i, path in enumerate(tree.modules)}

    def rank(path: str) -> tuple[int, int]:
        return (mcg_order[path], 0) if path in mcg_order else (len(mcg_order), met[path])

    children: dict[str, list[str]] = defaultdict(list)
    for path in tree.modules:
        if path:
            children[parent_path(path)].append(path)
    for kids in children.values():
        kids.sort(key=rank)

    # Iterative walks: a document may nest paths far deeper than Python's recursion limit.
    preorder: list[tuple[str, int]] = []
    pending = [("", 0)]
    while pending:
        path, depth = pending.pop()
        preorder.append((path, depth))
        pending.extend((kid, depth + 1) for kid in reversed(children[path]))

    totals: dict[str, tuple[int, dict[str, Tally]]] = {}
    for path, _ in reversed(preorder):
        module = tree.modules[path]
        nodes = module.nodes
        sums = dict(module.weights)
        for kid in children[path]:
            kid_nodes, kid_sums = totals[kid]
            nodes += kid_nodes
            sums = {k: sums[k].add(kid_sums[k]) for k in _KINDS}
        totals[path] = (nodes, sums)
    # a module's totals count a storage once: a tied weight is taken off every module holding
    # both it and the weight it is tied to (their common ancestor and its ancestors)
    for alias, target, kind, tally in ties:
        owner = _common_ancestor(alias, target)
        less = Tally(
            count=-tally.count, numel=-tally.numel, nbytes=-tally.nbytes, unknown=-tally.unknown
        )
        while True:
            nodes, sums = totals[owner]
            totals[owner] = (nodes, {**sums, kind: sums[kind].add(less)})
            if not owner:
                break
            owner = parent_path(owner)

    out: list[ModuleInfo] = []
    for path, depth in preorder:
        module = tree.modules[path]
        nodes, sums = totals[path]
        out.append(
            ModuleInfo(
                path=path,
                name=path.rsplit(".", 1)[-1],
                parent=parent_path(path) if path else None,
                depth=depth,
                kind=module.kind,
                type=module.type,
                calls=len(module.calls),
                call_names=[path if c == 0 else f"{path}@{c}" for c in sorted(module.calls)],
                nodes=module.nodes,
                total_nodes=nodes,
                parameters=module.weights["parameter"],
                buffers=module.weights["buffer"],
                constants=module.weights["constant"],
                total_parameters=sums["parameter"],
                total_buffers=sums["buffer"],
                total_constants=sums["constant"],
                signatures=module.signatures,
                children=children[path],
            )
        )
    return ModuleTree(modules=out)


# ---------------------------------------------------------------- module graph


@dataclass
class _Run:
    call: str
    entry: StackEntry
    nodes: list[int] = field(default_factory=list)


def module_graph(doc: ExportedProgram, depth: int) -> ModuleGraph:
    """Module calls at ``depth`` (0 is the whole program) as vertices, values between as edges.

    Depth counts nested module calls, not dotted path parts: ``layers.0`` called from the root
    is at depth 1. A vertex is one call of a module at that depth, or, for a shallower module
    whose own nodes are interleaved with its children's calls, one run of those nodes
    (``call#k``). Weights are not edges: a vertex's ``param_bytes`` counts the parameters,
    buffers and constants it is the first to read. Graph inputs and outputs are the vertices
    `INPUT` and `OUTPUT`, the root module's own nodes `ROOT` (``<root>#k`` for its k-th run of
    several); the graph is a chain when each vertex feeds exactly the next one.
    """
    if depth < 0:
        raise InspectFailure("invalid-depth", f"depth must be 0 or more, got {depth}")
    graph = doc.graph_module.graph
    check_defined(graph, "/graph_module/graph")
    stacks = graph_stacks(graph, NODES_POINTER)
    return _call_graph(doc, stacks, [stack[: depth + 1][-1] for stack in stacks], depth)


def _call_graph(
    doc: ExportedProgram,
    stacks: list[list[StackEntry]],
    picked: list[StackEntry],
    depth: int,
) -> ModuleGraph:
    """The dataflow between runs of consecutive nodes that share the module call picked from
    their stacks."""
    runs, ids, per_call = _runs(picked)
    flow = _Dataflow(doc, runs, ids)
    vertices = [
        Vertex(
            id=INPUT,
            kind="input",
            outputs=list(flow.used[INPUT]),
            outputs_used=len(flow.used[INPUT]),
        )
    ]
    for run, vid in zip(runs, ids, strict=True):
        mine = flow.read_first[vid]
        vertices.append(
            Vertex(
                id=vid,
                kind="module" if per_call[run.call] == 1 else "ops",
                module=run.entry.path,
                call=run.call,
                type=run.entry.type,
                nodes=len(run.nodes),
                param_bytes=sum(flow.weight_bytes[v] for v in mine),
                weights=[flow.weights[v].name for v in mine],
                outputs=list(flow.used[vid]),
                outputs_used=len(flow.used[vid]),
            )
        )
    vertices.append(Vertex(id=OUTPUT, kind="output"))
    order = {v.id: i for i, v in enumerate(vertices)}
    edge_list = [
        Edge(source=s, target=t, values=list(names))
        for (s, t), names in sorted(flow.edges.items(), key=lambda kv: _edge_rank(kv[0], order))
    ]
    chain = {(vertices[i].id, vertices[i + 1].id) for i in range(len(vertices) - 1)}
    return ModuleGraph(
        depth=depth,
        vertices=vertices,
        edges=edge_list,
        is_chain={(e.source, e.target) for e in edge_list} == chain,
    )


def _runs(picked: list[StackEntry]) -> tuple[list[_Run], list[str], Counter[str]]:
    """Runs of consecutive nodes of one call, their vertex ids (``call#k`` for a call's k-th run
    of several) and how many runs each call has."""
    runs: list[_Run] = []
    for i, entry in enumerate(picked):
        call = entry.call_name
        if not runs or runs[-1].call != call:
            runs.append(_Run(call, entry))
        runs[-1].nodes.append(i)
    per_call = Counter(run.call for run in runs)
    seen: Counter[str] = Counter()
    ids: list[str] = []
    for run in runs:
        name = run.call or ROOT
        if per_call[run.call] == 1:
            ids.append(name)
        else:
            ids.append(f"{name}#{seen[run.call]}")
            seen[run.call] += 1
    return runs, ids, per_call


class _Dataflow:
    """The values passed between vertices, and which vertex reads each weight first."""

    def __init__(self, doc: ExportedProgram, runs: list[_Run], ids: list[str]) -> None:
        graph = doc.graph_module.graph
        self.weights = {w.value: w for w in graph_weights(doc)}
        self.weight_bytes = {
            value: (nb[1] if (nb := meta_numel_bytes(w.meta)) else 0)
            for value, w in self.weights.items()
        }
        objects = set(custom_objects(doc))
        producer: dict[str, str] = {
            name: INPUT
            for name in graph_inputs(graph)
            if name not in self.weights and name not in objects
        }
        vertex_of_node: dict[int, str] = {}
        for run, vid in zip(runs, ids, strict=True):
            for i in run.nodes:
                vertex_of_node[i] = vid
                for name in node_outputs(graph.nodes[i]):
                    producer[name] = vid
        self.edges: dict[tuple[str, str], dict[str, None]] = defaultdict(dict)
        first_reader: dict[str, str] = {}
        for i, node in enumerate(graph.nodes):
            vid = vertex_of_node[i]
            for name in node_inputs(node):
                if name in self.weights:
                    first_reader.setdefault(name, vid)
                elif name in producer and producer[name] != vid:
                    self.edges[(producer[name], vid)][name] = None
        for name in graph_outputs(graph):
            if name in producer:
                self.edges[(producer[name], OUTPUT)][name] = None
        self.used: dict[str, dict[str, None]] = defaultdict(dict)
        for (source, _), names in self.edges.items():
            self.used[source].update(names)
        self.read_first: dict[str, list[str]] = defaultdict(list)
        for value, vid in first_reader.items():
            self.read_first[vid].append(value)


def _edge_rank(edge: tuple[str, str], order: dict[str, int]) -> tuple[int, int]:
    return order[edge[0]], order[edge[1]]


# ---------------------------------------------------------------- stages


def stage_graph(doc: ExportedProgram, k: int, by: StageCost = "param_bytes") -> ModuleGraph:
    """The module calls `stages` splits: the top-level calls, where each call costing more than
    a k-th of the whole is replaced by the calls inside it (the encoder by its transformer
    blocks), deeper until none is or no call has calls inside; and every call deeper at once
    while there are fewer than `k`."""
    if by not in ("param_bytes", "nodes"):
        raise InspectFailure(
            "invalid-stage-cost", f"stage cost must be param_bytes or nodes: {by!r}"
        )
    if k < 1:
        raise InspectFailure("invalid-stage-count", f"the stage count must be 1 or more: {k}")
    graph = doc.graph_module.graph
    check_defined(graph, "/graph_module/graph")
    stacks = graph_stacks(graph, NODES_POINTER)
    expanded: set[str] = set()
    for _ in range(MAX_STAGE_LEVELS):
        levels = [_level(stack, expanded) for stack in stacks]
        picked = [stack[level] for stack, level in zip(stacks, levels, strict=True)]
        split = _call_graph(doc, stacks, picked, max(levels, default=0))
        units = [v for v in split.vertices if v.kind in ("module", "ops")]
        inner = {
            entry.call_name
            for entry, stack, level in zip(picked, stacks, levels, strict=True)
            if level < len(stack) - 1
        }
        total = sum(_cost(v, by) for v in units)
        wide = {v.call for v in units if v.call in inner and _cost(v, by) * k > total}
        if not wide and len(units) < k:
            wide = {v.call for v in units if v.call in inner}
        if not wide:
            return split
        expanded.update(c for c in wide if c is not None)
    return split


#: How many times `stage_graph` looks one module level deeper at most.
MAX_STAGE_LEVELS = 64


def _level(stack: list[StackEntry], expanded: set[str]) -> int:
    """Where in a node's stack its stage unit is: the first call below the root not expanded."""
    level = 0
    for level in range(1, len(stack)):
        if stack[level].call_name not in expanded:
            break
    return level


def _cost(vertex: Vertex, by: StageCost) -> int:
    return vertex.param_bytes if by == "param_bytes" else vertex.nodes


def stages(doc: ExportedProgram, k: int, by: StageCost = "param_bytes") -> list[Stage]:
    """Split the module calls of `stage_graph`, in execution order, into ``k`` contiguous
    non-empty stages whose largest cost (parameter bytes or node count) is as small as
    possible."""
    graph = stage_graph(doc, k, by)
    units = [v for v in graph.vertices if v.kind in ("module", "ops")]
    if k > len(units):
        raise InspectFailure(
            "invalid-stage-count",
            f"cannot split into {k} stages: the program has {len(units)} module calls and runs "
            "of operators at most, at any depth",
        )
    costs = [_cost(v, by) for v in units]
    bound = _min_max_cost(costs, k)
    groups: list[list[int]] = []
    i = 0
    for s in range(k):
        group = [i]
        load = costs[i]
        i += 1
        while i < len(units) and load + costs[i] <= bound and len(units) - i > k - s - 1:
            load += costs[i]
            group.append(i)
            i += 1
        groups.append(group)

    stage_of = {units[i].id: s for s, group in enumerate(groups) for i in group}
    out: list[Stage] = []
    for s, group in enumerate(groups):
        members = [units[i] for i in group]
        inputs: dict[str, None] = {}
        outputs: dict[str, None] = {}
        for edge in graph.edges:
            src, dst = stage_of.get(edge.source), stage_of.get(edge.target)
            if dst == s and src != s:
                inputs.update(dict.fromkeys(edge.values))
            if src == s and dst != s:
                outputs.update(dict.fromkeys(edge.values))
        out.append(
            Stage(
                index=s,
                vertices=[v.id for v in members],
                modules=list(dict.fromkeys(v.module for v in members if v.module is not None)),
                nodes=sum(v.nodes for v in members),
                param_bytes=sum(v.param_bytes for v in members),
                cost=sum(costs[i] for i in group),
                inputs=list(inputs),
                outputs=list(outputs),
            )
        )
    return out


def _min_max_cost(costs: list[int], k: int) -> int:
    """The smallest bound such that ``costs`` splits into at most ``k`` runs within it."""

    def runs_needed(bound: int) -> int:
        count, load = 1, 0
        for cost in costs:
            if load + cost > bound:
                count += 1
                load = 0
            load += cost
        return count

    low, high = max(costs), sum(costs)
    while low < high:
        mid = (low + high) // 2
        if runs_needed(mid) <= k:
            high = mid
        else:
            low = mid + 1
    return low
