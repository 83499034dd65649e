"""Operator histograms of a document, and the operator namespaces a loader must register."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from app.programs import opset
from app.programs.inspect.common import subgraph_inputs, target_namespace, walk_subgraphs
from app.programs.inspect.models import OperatorCounts, OperatorStats
from schema.models import ExportedProgram, Node

#: Namespaces a well-known library outside torch defines in a module of that name.
_LIBRARY_MODULES: dict[str, str] = {"torchao": "torchao"}
#: The module to import first for each namespace whose provider is known.
PROVIDERS: dict[str, str] = {**opset.TORCH_NAMESPACE_MODULES, **_LIBRARY_MODULES}


def _torch_namespace(namespace: str) -> bool:
    """Registered by torch itself: a document using only these loads without imports."""
    return namespace == "higher_order" or opset.is_builtin_namespace(namespace)


def _counts(nodes: Iterable[Node]) -> OperatorCounts:
    targets = Counter(node.target for node in nodes)
    namespaces: Counter[str] = Counter()
    for target, count in targets.items():
        namespaces[target_namespace(target)] += count
    return OperatorCounts(
        nodes=sum(targets.values()),
        by_target=dict(sorted(targets.items())),
        by_namespace=dict(sorted(namespaces.items())),
    )


def operators(doc: ExportedProgram) -> OperatorStats:
    """How often each operator occurs in the graph and in each higher-order subgraph (keyed
    by dotted subgraph path), and which ``torch.ops`` namespaces are not torch's own."""
    graph = doc.graph_module.graph
    subgraphs = {path: _counts(sub.nodes) for path, _, sub in walk_subgraphs(graph)}
    every = list(graph.nodes) + [n for _, _, sub in walk_subgraphs(graph) for n in sub.nodes]
    total = _counts(every)
    custom = sorted(
        {
            target_namespace(target)
            for target in total.by_target
            if target.startswith("torch.ops.") and not _torch_namespace(target_namespace(target))
        }
    )
    placeholders = len(doc.graph_module.signature.input_specs)
    get_attrs = sum(len(subgraph_inputs(node)) for node in graph.nodes)
    return OperatorStats(
        graph=_counts(graph.nodes),
        subgraphs=subgraphs,
        total=total,
        custom_namespaces=custom,
        providers={ns: PROVIDERS[ns] for ns in custom if ns in PROVIDERS},
        nodes_with_io=placeholders + len(graph.nodes) + get_attrs + 1,
    )
