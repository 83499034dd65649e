"""The answer of the program diff: plain JSON-friendly pydantic models."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Verdict = Literal["identical", "same-graph-new-weights", "compatible", "breaking"]
WeightKind = Literal["parameter", "buffer", "constant"]
InterfaceChangeKind = Literal[
    "added",
    "removed",
    "renamed",
    "moved",
    "kind",
    "dtype",
    "device",
    "shape",
    "dynamic-range",
    "value",
    "structure",
    "mutation-added",
    "mutation-removed",
]
WeightChangeKind = Literal[
    "added", "removed", "renamed", "kind", "persistent", "dtype", "shape", "value", "layout"
]


class _Answer(BaseModel):
    # Value statistics can be infinite (a NaN against a number); torch's strings keep JSON valid.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


# ---------------------------------------------------------------- nodes


class NodeRef(_Answer):
    """A node as its document shows it: operator, the values it defines, its position."""

    target: str
    outputs: list[str]
    position: int


class ArgumentChange(_Answer):
    """One argument of a changed node: what it was and what it is (None: absent)."""

    position: int
    name: str
    old: str | None
    new: str | None


class OutputMetaChange(_Answer):
    """One output of a changed node whose dtype or shape differs."""

    position: int
    old: str | None
    new: str | None


class NodeChange(_Answer):
    """A node present on both sides whose operator, arguments, outputs or subgraphs differ."""

    old: NodeRef
    new: NodeRef
    target_changed: bool = False
    arguments: list[ArgumentChange] = Field(default_factory=list)
    outputs: list[OutputMetaChange] = Field(default_factory=list)
    subgraphs: list[GraphDiff] = Field(default_factory=list)


class GraphDiff(_Answer):
    """Nodes of one graph aligned structurally; ``name`` is "" for the program's own graph."""

    name: str = ""
    old_nodes: int = 0
    new_nodes: int = 0
    unchanged: int = 0
    added: list[NodeRef] = Field(default_factory=list)
    removed: list[NodeRef] = Field(default_factory=list)
    changed: list[NodeChange] = Field(default_factory=list)


# ---------------------------------------------------------------- interface


class InterfaceChange(_Answer):
    """A change callers of the program can see; ``breaking`` when an old call may now fail."""

    side: Literal["input", "output"]
    change: InterfaceChangeKind
    name: str
    old: str | None = None
    new: str | None = None
    breaking: bool
    detail: str


# ---------------------------------------------------------------- weights


class ValueStats(_Answer):
    """How two tensors of one dtype and shape differ, computed in float64 (complex128)."""

    numel: int
    differing: int
    max_abs_diff: float
    #: ||new - old|| / ||old||; None when the old tensor is all zeros.
    rel_norm: float | None


class WeightChange(_Answer):
    """A parameter, buffer or constant that was added, removed or changed."""

    name: str
    kind: WeightKind
    changes: list[WeightChangeKind]
    old_kind: WeightKind | None = None
    new_kind: WeightKind | None = None
    old_dtype: str | None = None
    new_dtype: str | None = None
    old_shape: list[int] | None = None
    new_shape: list[int] | None = None
    renamed_from: str | None = None
    old_digest: str | None = None
    new_digest: str | None = None
    stats: ValueStats | None = None
    note: str | None = None


# ---------------------------------------------------------------- the rest


class RangeChange(_Answer):
    """A range constraint added, removed or changed; ``symbol`` is its stable name."""

    symbol: str
    change: Literal["added", "removed", "changed"]
    old_name: str | None = None
    new_name: str | None = None
    old: str | None = None
    new: str | None = None


class OpsetChange(_Answer):
    """An operator namespace added, removed or at another version."""

    namespace: str
    old: int | None
    new: int | None


class ModuleChange(_Answer):
    """A module of the rebuilt hierarchy added, removed, of another class, or moved."""

    path: str
    change: Literal["added", "removed", "type", "moved"]
    old_type: str | None = None
    new_type: str | None = None
    #: where a moved module was (its weights moved with it: a layer inserted before it)
    old_path: str | None = None


class FieldChange(_Answer):
    """A program-level field whose value differs (schema version, torch version, guards)."""

    field: str
    old: str
    new: str


class Counts(_Answer):
    """How many changes of each sort the diff found."""

    nodes_added: int = 0
    nodes_removed: int = 0
    nodes_changed: int = 0
    nodes_unchanged: int = 0
    interface_changes: int = 0
    breaking_changes: int = 0
    weights_added: int = 0
    weights_removed: int = 0
    weights_changed: int = 0
    weights_new_values: int = 0
    range_constraints_changed: int = 0
    opsets_changed: int = 0
    modules_changed: int = 0


class Summary(_Answer):
    """The verdict, the counts behind it and one line for humans."""

    verdict: Verdict
    counts: Counts
    #: whether stored tensor values were compared (both sides came with weights).
    weights_compared: bool
    text: str


class ProgramDiff(_Answer):
    """What changed between two exported programs."""

    summary: Summary
    graph: GraphDiff
    interface: list[InterfaceChange] = Field(default_factory=list)
    parameters: list[WeightChange] = Field(default_factory=list)
    buffers: list[WeightChange] = Field(default_factory=list)
    constants: list[WeightChange] = Field(default_factory=list)
    range_constraints: list[RangeChange] = Field(default_factory=list)
    opsets: list[OpsetChange] = Field(default_factory=list)
    modules: list[ModuleChange] = Field(default_factory=list)
    #: schema version, torch version, verifiers and guards code, when they differ.
    fields: list[FieldChange] = Field(default_factory=list)
    #: what could not be compared, and why.
    notes: list[str] = Field(default_factory=list)


NodeChange.model_rebuild()
