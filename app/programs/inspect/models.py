"""The answers of the inspection views: plain JSON-friendly pydantic models."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Tally(_View):
    """How many tensors, elements and bytes; ``unknown`` counts tensors of unknown size."""

    count: int = 0
    numel: int = 0
    nbytes: int = 0
    unknown: int = 0

    def add(self, other: Tally) -> Tally:
        """The sum of two tallies."""
        return Tally(
            count=self.count + other.count,
            numel=self.numel + other.numel,
            nbytes=self.nbytes + other.nbytes,
            unknown=self.unknown + other.unknown,
        )


# ---------------------------------------------------------------- module tree


class CallSignature(_View):
    """A module call whose calling convention the program preserved."""

    call: str
    inputs: list[str]
    outputs: list[str]
    in_spec: str
    out_spec: str
    forward_arg_names: list[str] | None = None


class ModuleInfo(_View):
    """One module (or higher-order-operator subgraph) of the rebuilt hierarchy."""

    path: str
    name: str
    parent: str | None
    depth: int
    kind: Literal["module", "subgraph"]
    type: str | None
    calls: int
    call_names: list[str]
    nodes: int
    total_nodes: int
    parameters: Tally
    buffers: Tally
    constants: Tally
    total_parameters: Tally
    total_buffers: Tally
    total_constants: Tally
    signatures: list[CallSignature] = Field(default_factory=list)
    children: list[str] = Field(default_factory=list)


class ModuleTree(_View):
    """The module hierarchy, root first, in the order ``torch.export.unflatten`` lists it."""

    modules: list[ModuleInfo]

    def module(self, path: str) -> ModuleInfo:
        """The module at ``path`` (KeyError when there is none)."""
        for info in self.modules:
            if info.path == path:
                return info
        raise KeyError(path)


# ---------------------------------------------------------------- module graph


class Vertex(_View):
    """A module call (or a run of a module's own nodes) at the chosen depth."""

    id: str
    kind: Literal["input", "module", "ops", "output"]
    module: str | None = None
    call: str | None = None
    type: str | None = None
    nodes: int = 0
    param_bytes: int = 0
    weights: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    outputs_used: int = 0


class Edge(_View):
    """Values one vertex defines and another reads."""

    source: str
    target: str
    values: list[str]


class ModuleGraph(_View):
    """Module calls as vertices in execution order, the values between them as edges."""

    depth: int
    vertices: list[Vertex]
    edges: list[Edge]
    is_chain: bool


class Stage(_View):
    """A contiguous run of module calls (vertices of `stage_graph`) run as one pipeline stage."""

    index: int
    vertices: list[str]
    modules: list[str]
    nodes: int
    param_bytes: int
    cost: int
    inputs: list[str]
    outputs: list[str]


# ---------------------------------------------------------------- partitions


class Partition(_View):
    """Supported nodes that can run as one unit, with the values crossing its boundary."""

    nodes: list[str]
    inputs: list[str]
    outputs: list[str]


# ---------------------------------------------------------------- operators


class OperatorCounts(_View):
    """How often each operator target and namespace occurs in a set of nodes."""

    nodes: int = 0
    by_target: dict[str, int] = Field(default_factory=dict)
    by_namespace: dict[str, int] = Field(default_factory=dict)


class OperatorStats(_View):
    """Operator histograms of the main graph, of each subgraph, and of everything."""

    graph: OperatorCounts
    subgraphs: dict[str, OperatorCounts]
    total: OperatorCounts
    custom_namespaces: list[str]
    providers: dict[str, str]
    #: The main graph's nodes counted as torch's ``len(ep.graph.nodes)`` does: the call nodes a
    #: document holds, plus a placeholder per input, a get_attr per subgraph and the output,
    #: which it does not (torch also adds a getitem per output of a cond or map it loads).
    nodes_with_io: int = 0


# ---------------------------------------------------------------- weights


class WeightEntry(_View):
    """One weight: where it comes from, its type and its size."""

    name: str
    kind: Literal["parameter", "buffer", "constant"]
    dtype: str | None
    shape: list[int] | None
    nbytes: int | None
    persistent: bool = True
    value: str | None = None
    #: the weight whose storage this one shares (a tied weight): the totals count it once
    tied_to: str | None = None


class ValueRef(_View):
    """A graph value, with the weight it is bound to when it is one."""

    value: str
    weight: str | None = None


class QuantParams(_View):
    """A quantize or dequantize node and the parameters its arguments carry."""

    node: str
    graph: str
    target: str
    op: Literal["quantize", "dequantize"]
    scheme: Literal["per_tensor", "per_channel", "per_token", "per_channel_group", "per_block"]
    symmetric: bool | None
    input: ValueRef
    output: str | None
    scale: float | None = None
    zero_point: int | None = None
    axis: int | None = None
    group_size: int | None = None
    block_size: list[int] | None = None
    quant_min: int | None = None
    quant_max: int | None = None
    dtype: str | None = None
    out_dtype: str | None = None
    tensors: dict[str, ValueRef] = Field(default_factory=dict)


class WeightStats(_View):
    """Weights by kind and dtype, each weight, and the quantization the graph applies. The
    tallies count each stored tensor once: a tied weight is listed but not counted again."""

    total: Tally
    #: every weight counted, tied ones again (what a naive sum over the names gives)
    total_with_ties: Tally
    by_kind: dict[str, Tally]
    by_dtype: dict[str, Tally]
    tensors: list[WeightEntry]
    custom_objects: list[str]
    not_in_manifest: list[str]
    not_in_signature: list[str]
    quantized: list[QuantParams]
