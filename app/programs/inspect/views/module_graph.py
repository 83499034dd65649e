"""Module calls at a depth as a dataflow graph."""

from __future__ import annotations

from app.programs.inspect.models import ModuleGraph
from app.programs.inspect.modules import module_graph
from app.programs.inspect.view import InspectRequest, Subject, View, megabytes


def _run(subject: Subject, request: InspectRequest) -> ModuleGraph:
    return module_graph(subject.doc, request.depth)


def _render(graph: ModuleGraph) -> str:
    lines = [f"depth {graph.depth}: {len(graph.vertices)} vertices, chain={graph.is_chain}"]
    lines += [
        f"  {v.id}  {v.type or v.kind}  nodes={v.nodes} params={megabytes(v.param_bytes)}"
        for v in graph.vertices
        if v.kind in ("module", "ops")
    ]
    lines += [f"  {e.source} -> {e.target}  ({len(e.values)} values)" for e in graph.edges]
    return "\n".join(lines)


VIEW = View(
    "module-graph", "module calls at a depth as a dataflow graph", ModuleGraph, _run, _render
)
