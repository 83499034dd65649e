"""What changed between two exported programs: nodes, interface, weights, ranges, opsets, modules.

`diff_programs` compares two documents, and their stored tensors when a `WeightSource` is
given for each side (`app.operations.program_diff` reads both sides of a request the way
every operation does). The result's summary is one of:

- ``identical``: nothing differs (weights included when both sides came with them);
- ``same-graph-new-weights``: only stored tensor values (or their layout) differ;
- ``compatible``: the program changed, but every call the old one accepted still works;
- ``breaking``: some interface change may break a caller.

Nodes are aligned structurally (`app.programs.diff.nodes`), so names, node metadata and the
order torch happened to emit never count as changes; nor do the Python modules the model's
classes were defined in (module types are compared by class name), nor a different torch
version alone (reported, but no verdict changes for it).
"""

from app.programs.diff.models import (
    ArgumentChange,
    Counts,
    FieldChange,
    GraphDiff,
    InterfaceChange,
    ModuleChange,
    NodeChange,
    NodeRef,
    OpsetChange,
    ProgramDiff,
    RangeChange,
    Summary,
    ValueStats,
    Verdict,
    WeightChange,
)
from app.programs.diff.program import diff_programs
from app.programs.diff.text import render_text
from app.programs.values import ArchiveWeights, RawWeights, StoredTensor, WeightSource

__all__ = [
    "ArchiveWeights",
    "ArgumentChange",
    "Counts",
    "FieldChange",
    "GraphDiff",
    "InterfaceChange",
    "ModuleChange",
    "NodeChange",
    "NodeRef",
    "OpsetChange",
    "ProgramDiff",
    "RangeChange",
    "RawWeights",
    "StoredTensor",
    "Summary",
    "ValueStats",
    "Verdict",
    "WeightChange",
    "WeightSource",
    "diff_programs",
    "render_text",
]
