"""What is in this model: views of one program document, answered without torch.

- `module_tree`: the module hierarchy ``torch.export.unflatten`` rebuilds, with calls, node
  counts, weight sizes and preserved call signatures;
- `module_graph` and `stages`: module calls at a depth as a dataflow graph, and a balanced split
  of the module calls into contiguous pipeline stages, as deep as balance needs (`stage_graph`:
  transformer blocks rather than the one encoder that holds them);
- `partitions`: what torch's ``CapabilityBasedPartitioner`` proposes for a set of supported
  operators;
- `operators`: operator histograms and the namespaces a loader must register first;
- `weights`: weights by kind and dtype, and the quantization parameters the graph carries.

Every view takes a validated `schema.ExportedProgram` and returns pydantic models; bad input
raises `InspectFailure` with a stable code. The views the API and the command line offer are
the modules of `app.programs.inspect.views`, gathered by `app.programs.inspect.registry`;
`graph_view` is the web UI's graph answer.
"""

from __future__ import annotations

from app.programs.inspect.common import (
    InspectFailure,
    WeightCounts,
    WeightInfo,
    WeightKind,
    expression_text,
    size_value,
    weight_counts,
)
from app.programs.inspect.models import (
    CallSignature,
    Edge,
    ModuleGraph,
    ModuleInfo,
    ModuleTree,
    OperatorCounts,
    OperatorStats,
    Partition,
    QuantParams,
    Stage,
    Tally,
    ValueRef,
    Vertex,
    WeightEntry,
    WeightStats,
)
from app.programs.inspect.modules import (
    INPUT,
    OUTPUT,
    ROOT,
    StageCost,
    module_graph,
    module_tree,
    stage_graph,
    stages,
)
from app.programs.inspect.ops import operators
from app.programs.inspect.partition import MAX_PARTITION_NODES, partitions
from app.programs.inspect.weights import quantization, weights

__all__ = [
    "INPUT",
    "MAX_PARTITION_NODES",
    "OUTPUT",
    "ROOT",
    "CallSignature",
    "Edge",
    "InspectFailure",
    "ModuleGraph",
    "ModuleInfo",
    "ModuleTree",
    "OperatorCounts",
    "OperatorStats",
    "Partition",
    "QuantParams",
    "Stage",
    "StageCost",
    "Tally",
    "ValueRef",
    "Vertex",
    "WeightCounts",
    "WeightEntry",
    "WeightInfo",
    "WeightKind",
    "WeightStats",
    "expression_text",
    "module_graph",
    "module_tree",
    "operators",
    "partitions",
    "quantization",
    "stage_graph",
    "size_value",
    "stages",
    "weight_counts",
    "weights",
]
