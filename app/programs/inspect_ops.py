"""Operator histograms of a document, and the operator namespaces a loader must register."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from app.programs.inspect_common import subgraph_inputs, target_namespace, walk_subgraphs
from app.programs.inspect_models import OperatorCounts, OperatorStats
from schema.models import ExportedProgram, Node

#: Operator namespaces importing torch 2.13 (CPU) registers, plus higher-order operators: a
#: document using only these loads without importing anything else first.
TORCH_NAMESPACES = frozenset(
    {
        "aten",
        "prims",
        "higher_order",
        "_c10d_functional",
        "_c10d_functional_autograd",
        "_dtensor",
        "_native",
        "_quantized",
        "_test",
        "c10d",
        "debug_mode_ops",
        "debugprims",
        "export",
        "inductor",
        "inductor_prims",
        "mkl",
        "mkldnn",
        "mkldnn_prepacked",
        "onednn",
        "profiler",
        "quantization",
        "quantized",
        "rngprims",
        "sparse",
        "static_runtime",
        "symm_mem",
    }
)

#: Namespaces torch or a well-known library defines in a Python module that must be imported.
PROVIDERS: dict[str, str] = {
    "quantized_decomposed": "torch.ao.quantization.fx._decomposed",
    "torchao": "torchao",
}


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
            if target.startswith("torch.ops.") and target_namespace(target) not in TORCH_NAMESPACES
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
