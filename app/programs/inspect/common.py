"""What every inspection view reads off a document: value names, targets, module stacks, weights.

Nothing here imports torch. The facts about torch's wire form come from its serializer
(torch/_export/serde/serialize.py): ``nn_module_stack`` metadata is ``key,path,type`` entries
joined by ``;`` (commas inside brackets or parentheses belong to the entry), a node's value names
are its output arguments, and a weight is a graph input named in the signature's input specs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from app.failure import Failure
from app.programs.graph import scope, walk_graphs
from app.programs.graph import values as value_names
from schema import Issue
from schema.dtypes import ITEMSIZE
from schema.models import (
    ArgumentAsGraph,
    ExportedProgram,
    Graph,
    GraphArgument,
    InputSpecBuffer,
    InputSpecCustomObj,
    InputSpecParameter,
    InputSpecTensorConstant,
    Node,
    ScalarType,
    SymExprHintAsInt,
    SymIntAsExpr,
    SymIntAsInt,
    TensorMeta,
)

#: sympy's ``srepr`` form of a symbol, which torch writes in ``expr_str``.
_SREPR_SYMBOL = re.compile(r"Symbol\('([^']*)'[^)]*\)")
_SREPR_INTEGER = re.compile(r"Integer\((-?[0-9]+)\)")

WeightKind = Literal["parameter", "buffer", "constant"]


NODES_POINTER = "/graph_module/graph/nodes"


class InspectFailure(Failure):
    """A document an inspection view cannot answer for, or a request it cannot satisfy."""


@dataclass(frozen=True)
class WeightInfo:
    """One weight as a manifest describes it (e.g. an archive's payload config)."""

    name: str
    kind: WeightKind
    dtype: ScalarType
    shape: tuple[int, ...]
    nbytes: int
    #: the weight whose storage and view this one is (a tied weight), counted once with it
    tied_to: str | None = None

    @classmethod
    def from_meta(
        cls,
        name: str,
        kind: WeightKind,
        meta: TensorMeta,
        nbytes: int,
        tied_to: str | None = None,
    ) -> WeightInfo:
        """A manifest entry from tensor meta (static sizes) and the stored byte count."""
        shape = static_shape(meta)
        if shape is None:
            raise InspectFailure("unknown-shape", f"weight {name!r} has a symbolic size")
        return cls(name, kind, meta.dtype, shape, nbytes, tied_to)


# ---------------------------------------------------------------- values


def node_inputs(node: Node) -> list[str]:
    """Names of the values a node reads, in argument order, without repeats."""
    seen: dict[str, None] = {}
    for named in node.inputs:
        for name in value_names(named.arg):
            seen.setdefault(name, None)
    return list(seen)


def node_outputs(node: Node) -> list[str]:
    """Names of the values a node defines, in output order."""
    return [name for out in node.outputs for name in value_names(out)]


def graph_inputs(graph: Graph) -> list[str]:
    """Names of a graph's input values."""
    return [name for arg in graph.inputs for name in value_names(arg)]


def graph_outputs(graph: Graph) -> list[str]:
    """Names of a graph's output values, without repeats."""
    return list(dict.fromkeys(name for arg in graph.outputs for name in value_names(arg)))


def node_name(node: Node, index: int) -> str:
    """The node's name: its ``name`` field (schema 8.17+), else its first output value's."""
    if node.name:
        return node.name
    outputs = node_outputs(node)
    return outputs[0] if outputs else f"{op_name(node.target)}_{index}"


def subgraph_arguments(node: Node) -> list[GraphArgument]:
    """The subgraphs a higher-order operator node takes, in argument order."""
    return [sub for _, sub in subgraph_inputs(node)]


def subgraph_inputs(node: Node) -> list[tuple[int, GraphArgument]]:
    """The subgraphs a higher-order operator node takes, with their input positions."""
    return [
        (j, named.arg.as_graph)
        for j, named in enumerate(node.inputs)
        if isinstance(named.arg, ArgumentAsGraph)
    ]


def walk_subgraphs(graph: Graph) -> Iterator[tuple[str, Node, Graph]]:
    """Every nested subgraph as (dotted path, owning node, graph), outer before inner."""
    for site in walk_graphs(graph):
        if site.owner is not None:
            yield site.dotted, site.owner, site.graph


def check_defined(graph: Graph, pointer: str) -> None:
    """Fail unless every value a node reads is a graph input or an earlier node's output."""
    found: dict[tuple[int | None, str], Issue] = {}
    for ref in scope(graph):
        if ref.defines or ref.status == "ok" or (ref.node, ref.name) in found:
            continue
        if ref.node is None:
            where, message = f"{pointer}/outputs", f"output {ref.name!r} is not defined"
            issue = Issue("undefined-value", where, message)
        else:
            issue = Issue(
                "undefined-value",
                f"{pointer}/nodes/{ref.node}",
                f"node {node_name(graph.nodes[ref.node], ref.node)!r} reads {ref.name!r}, "
                "defined by no input or earlier node",
            )
        found[ref.node, ref.name] = issue
    if found:
        issues = list(found.values())
        raise InspectFailure(
            "undefined-value", f"{len(issues)} reference(s) to undefined values", issues
        )


# ---------------------------------------------------------------- targets


def target_namespace(target: str) -> str:
    """An operator's namespace: ``aten`` for ``torch.ops.aten.add.Tensor``, else its module."""
    if target.startswith("torch.ops."):
        parts = target.split(".")
        return parts[2] if len(parts) > 2 else target
    return target.rsplit(".", 1)[0] if "." in target else target


def op_name(target: str) -> str:
    """An operator's short name: ``add`` for ``torch.ops.aten.add.Tensor``."""
    parts = target.split(".")
    if target.startswith("torch.ops.") and len(parts) > 3:
        return parts[3]
    return parts[-1]


# ---------------------------------------------------------------- module stacks


@dataclass(frozen=True)
class StackEntry:
    """One frame of a node's module stack: the module's path, class and which call it is."""

    key: str
    path: str
    type: str | None
    call: int

    @property
    def call_name(self) -> str:
        """How torch names this call: ``path`` for the first, ``path@n`` for the (n+1)-th."""
        return self.path if self.call == 0 else f"{self.path}@{self.call}"


_CLASS_REPR = re.compile(r"^<class '(.+)'>$")


def _split_entry(text: str) -> list[str]:
    """Split ``key,path,type`` at top-level commas; brackets and parentheses nest."""
    if "[" not in text and "(" not in text:
        return text.split(",")
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_module_stack(text: str, where: str) -> list[StackEntry]:
    """Parse serialized ``nn_module_stack`` metadata, outermost module first."""
    entries: list[StackEntry] = []
    for item in text.split(";"):
        parts = _split_entry(item)
        if len(parts) != 3:
            raise InspectFailure(
                "bad-module-stack",
                f"{where}: cannot read nn_module_stack entry {item[:80]!r}",
                [Issue("bad-module-stack", where, f"expected 'key,path,type', got {item[:80]!r}")],
            )
        key, path, type_ = parts
        call_text = key.rsplit("@", 1)[1] if "@" in key else "0"
        if not call_text.isdigit():
            raise InspectFailure(
                "bad-module-stack",
                f"{where}: bad call index in nn_module_stack key {key[:80]!r}",
                [Issue("bad-module-stack", where, f"bad call index in key {key[:80]!r}")],
            )
        match = _CLASS_REPR.match(type_)
        entries.append(
            StackEntry(key, path, (match.group(1) if match else type_) or None, int(call_text))
        )
    return entries


_ROOT = StackEntry("", "", None, 0)

#: The key torch's metadata hook writes on nodes it inserts outside any module call; such a node
#: runs in whichever module call the previous node ran in.
EMPTY_STACK_KEY = "_empty_nn_module_stack_from_metadata_hook"


def module_stack(node: Node, where: str) -> list[StackEntry] | None:
    """A node's module stack as torch's unflattener uses it: rooted, and cut where it stops
    nesting (a path that does not extend the previous one ends the stack); None for a node
    that belongs to the module call of the node before it."""
    text = node.metadata.get("nn_module_stack")
    entries = parse_module_stack(text, where) if text else []
    if len(entries) == 1 and entries[0].key == EMPTY_STACK_KEY:
        return None
    if not entries or entries[0].path:
        entries.insert(0, _ROOT)
    kept = [entries[0]]
    for entry in entries[1:]:
        previous = kept[-1].path
        if len(previous) < len(entry.path) and entry.path.startswith(previous):
            kept.append(entry)
        else:
            break
    return kept


def graph_stacks(graph: Graph, pointer: str) -> list[list[StackEntry]]:
    """The module stack of every node of a graph, in node order (see `module_stack`); nodes
    with the same metadata share one stack (the lists are not to be changed)."""
    stacks: list[list[StackEntry]] = []
    # The nodes of one module call carry the same text: each text is parsed once.
    parsed: dict[str, list[StackEntry] | None] = {}
    for i, node in enumerate(graph.nodes):
        text = node.metadata.get("nn_module_stack") or ""
        if text in parsed:
            stack = parsed[text]
        else:
            stack = parsed[text] = module_stack(node, f"{pointer}/{i}/metadata/nn_module_stack")
        stacks.append(stack if stack is not None else (stacks[-1] if stacks else [_ROOT]))
    return stacks


def parent_path(path: str) -> str:
    """The dotted parent of a module or attribute path (``""`` for a top-level name)."""
    return path.rsplit(".", 1)[0] if "." in path else ""


# ---------------------------------------------------------------- weights


@dataclass(frozen=True)
class GraphWeight:
    """A graph input bound to a parameter, buffer or lifted tensor constant."""

    name: str
    kind: WeightKind
    value: str
    persistent: bool
    meta: TensorMeta | None


def graph_weights(doc: ExportedProgram) -> list[GraphWeight]:
    """The weights of the signature, in input order, with their tensor meta where known."""
    metas = doc.graph_module.graph.tensor_values
    found: list[GraphWeight] = []
    for spec in doc.graph_module.signature.input_specs:
        if isinstance(spec, InputSpecParameter):
            p = spec.parameter
            found.append(GraphWeight(p.parameter_name, "parameter", p.arg.name, True, None))
        elif isinstance(spec, InputSpecBuffer):
            b = spec.buffer
            found.append(GraphWeight(b.buffer_name, "buffer", b.arg.name, b.persistent, None))
        elif isinstance(spec, InputSpecTensorConstant):
            c = spec.tensor_constant
            found.append(GraphWeight(c.tensor_constant_name, "constant", c.arg.name, True, None))
    return [GraphWeight(w.name, w.kind, w.value, w.persistent, metas.get(w.value)) for w in found]


@dataclass(frozen=True)
class WeightCounts:
    """How many weights of each kind a program holds, and its parameters' elements."""

    parameters: int
    buffers: int
    constants: int
    #: elements of every parameter, a tied one counted once, as torch's
    #: ``sum(p.numel() for p in module.parameters())`` counts them (None when a parameter's size
    #: is symbolic without a hint)
    parameter_count: int | None
    #: parameters tied to another one (sharing its storage), left out of `parameter_count`
    tied_parameters: int = 0


def weight_counts(doc: ExportedProgram, tied: Mapping[str, str] | None = None) -> WeightCounts:
    """The program's weights tallied by kind, from the signature and the tensor meta; `tied`
    (alias -> the weight it shares storage with, `app.operations.tied_weights`) names the
    parameters counted once."""
    weights = graph_weights(doc)
    parameters = [w for w in weights if w.kind == "parameter"]
    ties = tied or {}
    sizes = [meta_numel_bytes(w.meta) for w in parameters if w.name not in ties]
    return WeightCounts(
        parameters=len(parameters),
        buffers=sum(w.kind == "buffer" for w in weights),
        constants=sum(w.kind == "constant" for w in weights),
        parameter_count=None if None in sizes else sum(c[0] for c in sizes if c is not None),
        tied_parameters=len(parameters) - len(sizes),
    )


def custom_objects(doc: ExportedProgram) -> list[str]:
    """Names of the script objects the signature binds to graph inputs."""
    return [
        spec.custom_obj.custom_obj_name
        for spec in doc.graph_module.signature.input_specs
        if isinstance(spec, InputSpecCustomObj)
    ]


def static_shape(meta: TensorMeta) -> tuple[int, ...] | None:
    """A tensor's sizes as ints (a symbolic size counts by its hint), None when unknown."""
    sizes: list[int] = []
    for size in meta.sizes:
        if isinstance(size, SymIntAsInt):
            sizes.append(size.as_int)
        elif isinstance(size, SymIntAsExpr) and isinstance(size.as_expr.hint, SymExprHintAsInt):
            sizes.append(size.as_expr.hint.as_int)
        else:
            return None
    return tuple(sizes)


def meta_numel_bytes(meta: TensorMeta | None) -> tuple[int, int] | None:
    """(elements, bytes) of a dense tensor with this meta, None when either is unknown."""
    if meta is None:
        return None
    shape = static_shape(meta)
    size = ITEMSIZE.get(meta.dtype)
    if shape is None or size is None:
        return None
    numel = 1
    for dim in shape:
        numel *= dim
    return numel, numel * size


@lru_cache(maxsize=4096)
def expression_text(expr_str: str) -> str:
    """An ``expr_str`` as a reader wants it: ``srepr`` symbols and integers unwrapped."""
    # a few distinct expressions recur on every node of a large program: each is rewritten once
    return _SREPR_INTEGER.sub(_group, _SREPR_SYMBOL.sub(_group, expr_str))


def _group(match: re.Match[str]) -> str:
    return match.group(1)


def size_value(size: SymIntAsExpr | SymIntAsInt) -> int | str:
    """A size as a reader wants it: the int, or the symbolic expression unwrapped (``s0``)."""
    if isinstance(size, SymIntAsInt):
        return size.as_int
    return expression_text(size.as_expr.expr_str)


def size_text(size: SymIntAsExpr | SymIntAsInt) -> str:
    """A size as text: ``4``, ``s0``, ``Mul(2, s0)``."""
    return str(size_value(size))
