"""What torch's ``CapabilityBasedPartitioner`` proposes for a set of supported operators."""

from __future__ import annotations

from pydantic import BaseModel

from app.programs.inspect.models import Partition
from app.programs.inspect.partition import partitions
from app.programs.inspect.view import InspectRequest, Subject, View


class PartitionsView(BaseModel):
    """What a capability-based partitioner proposes for a set of supported operators."""

    supported: list[str]
    partitions: list[Partition]


def _run(subject: Subject, request: InspectRequest) -> PartitionsView:
    found = partitions(
        subject.doc, set(request.supported), request.allow_single_node, subject.max_nodes
    )
    return PartitionsView(supported=sorted(request.supported), partitions=found)


def _render(view: PartitionsView) -> str:
    lines = [f"{len(view.partitions)} partitions for {', '.join(view.supported)}"]
    for i, part in enumerate(view.partitions):
        lines.append(f"  #{i}: {len(part.nodes)} nodes: {', '.join(part.nodes[:8])}")
    return "\n".join(lines)


VIEW = View(
    "partitions", "partitions for a set of supported operators", PartitionsView, _run, _render
)
