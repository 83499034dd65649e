"""Operator histograms and the namespaces a loader must register first."""

from __future__ import annotations

from app.programs.inspect.models import OperatorStats
from app.programs.inspect.ops import operators
from app.programs.inspect.view import InspectRequest, Subject, View


def _run(subject: Subject, request: InspectRequest) -> OperatorStats:
    return operators(subject.doc)


def _render(stats: OperatorStats) -> str:
    total, main = stats.total, stats.graph.nodes
    nested = f", {total.nodes} with its subgraphs" if total.nodes != main else ""
    lines = [
        f"{main} call nodes in the graph{nested} ({stats.nodes_with_io} with placeholders, "
        "get_attrs and the output, as torch counts them)"
    ]
    ranked = sorted(total.by_target.items(), key=lambda kv: -kv[1])
    lines += [f"  {count:6}  {target}" for target, count in ranked]
    if stats.custom_namespaces:
        lines.append(f"register first: {', '.join(stats.custom_namespaces)}")
    return "\n".join(lines)


VIEW = View("operators", "operator histograms and namespaces", OperatorStats, _run, _render)
