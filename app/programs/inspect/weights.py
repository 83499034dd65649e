"""Weights by kind and dtype, and the quantization parameters a graph's nodes carry.

Quantization is read off the nodes of pt2e-style programs: ``quantized_decomposed`` quantize
and dequantize operators (per tensor, per channel, per token, per channel group) and torchao's
``quantize_affine``/``dequantize_affine``. Arguments are read by their schema names; literal
scales and zero points are reported as numbers, tensor ones by value name (and weight name when
the tensor is a weight), since their values live in the weights, not in the document.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal

from app.archive.tensors import dtype_name
from app.programs.inspect.common import (
    WeightInfo,
    custom_objects,
    graph_weights,
    meta_numel_bytes,
    node_name,
    node_outputs,
    op_name,
    static_shape,
    target_namespace,
    walk_subgraphs,
)
from app.programs.inspect.models import QuantParams, Tally, ValueRef, WeightEntry, WeightStats
from schema.models import (
    Argument,
    ArgumentAsFloat,
    ArgumentAsInt,
    ArgumentAsInts,
    ArgumentAsNone,
    ArgumentAsScalarType,
    ArgumentAsTensor,
    ExportedProgram,
    Graph,
    Node,
)

Scheme = Literal["per_tensor", "per_channel", "per_token", "per_channel_group", "per_block"]

#: Operator name suffixes (longest first) and the granularity they quantize at.
_SCHEMES: tuple[tuple[str, Scheme], ...] = (
    ("_per_channel_group", "per_channel_group"),
    ("_per_channel", "per_channel"),
    ("_per_tensor", "per_tensor"),
    ("_per_token", "per_token"),
    ("_affine", "per_block"),
)
_QUANT_NAMESPACES = frozenset({"quantized_decomposed", "torchao"})


def weights(doc: ExportedProgram, manifest: Sequence[WeightInfo] | None = None) -> WeightStats:
    """Counts and bytes of the weights by kind and dtype, each weight, and quantized tensors.

    Sizes come from the manifest when one is given (the stored bytes), else from the tensor
    meta of the weight's graph input (elements times item size).
    """
    in_graph = graph_weights(doc)
    named = {info.name: info for info in manifest} if manifest is not None else {}
    entries: list[WeightEntry] = []
    for weight in in_graph:
        info = named.get(weight.name)
        if info is not None:
            entries.append(_from_manifest(info, weight.persistent, weight.value))
            continue
        sizes = meta_numel_bytes(weight.meta)
        shape = static_shape(weight.meta) if weight.meta is not None else None
        entries.append(
            WeightEntry(
                name=weight.name,
                kind=weight.kind,
                dtype=dtype_name(weight.meta.dtype) if weight.meta is not None else None,
                shape=list(shape) if shape is not None else None,
                nbytes=sizes[1] if sizes is not None else None,
                persistent=weight.persistent,
                value=weight.value,
            )
        )
    graph_names = {w.name for w in in_graph}
    for info in manifest or ():
        if info.name not in graph_names:
            entries.append(_from_manifest(info, True, None))

    by_kind: dict[str, Tally] = {}
    by_dtype: dict[str, Tally] = {}
    total = with_ties = Tally()
    for entry in entries:
        one = _tally(entry)
        with_ties = with_ties.add(one)
        if entry.tied_to is not None:
            continue
        total = total.add(one)
        by_kind[entry.kind] = by_kind.get(entry.kind, Tally()).add(one)
        key = entry.dtype or "unknown"
        by_dtype[key] = by_dtype.get(key, Tally()).add(one)

    return WeightStats(
        total=total,
        total_with_ties=with_ties,
        by_kind=by_kind,
        by_dtype=dict(sorted(by_dtype.items())),
        tensors=entries,
        custom_objects=custom_objects(doc),
        not_in_manifest=[w.name for w in in_graph if manifest is not None and w.name not in named],
        not_in_signature=[i.name for i in manifest or () if i.name not in graph_names],
        quantized=quantization(doc),
    )


def _from_manifest(info: WeightInfo, persistent: bool, value: str | None) -> WeightEntry:
    return WeightEntry(
        name=info.name,
        kind=info.kind,
        dtype=dtype_name(info.dtype),
        shape=list(info.shape),
        nbytes=info.nbytes,
        persistent=persistent,
        value=value,
        tied_to=info.tied_to,
    )


def _tally(entry: WeightEntry) -> Tally:
    if entry.nbytes is None or entry.shape is None:
        return Tally(count=1, unknown=1)
    numel = 1
    for dim in entry.shape:
        numel *= dim
    return Tally(count=1, numel=numel, nbytes=entry.nbytes)


# ---------------------------------------------------------------- quantization


def _graphs(doc: ExportedProgram) -> Iterator[tuple[str, Graph]]:
    graph = doc.graph_module.graph
    yield "", graph
    for path, _, sub in walk_subgraphs(graph):
        yield path, sub


def quantization(doc: ExportedProgram) -> list[QuantParams]:
    """Every quantize/dequantize node of the graph and its subgraphs, with its parameters."""
    bound = {w.value: w.name for w in graph_weights(doc)}
    found: list[QuantParams] = []
    for path, graph in _graphs(doc):
        for i, node in enumerate(graph.nodes):
            params = _quant_params(node, i, path, bound if not path else {})
            if params is not None:
                found.append(params)
    return found


def _scheme(target: str) -> tuple[Literal["quantize", "dequantize"], Scheme] | None:
    if target_namespace(target) not in _QUANT_NAMESPACES:
        return None
    name = op_name(target)
    if name.startswith("quantize_"):
        op: Literal["quantize", "dequantize"] = "quantize"
    elif name.startswith("dequantize_"):
        op = "dequantize"
    else:
        return None
    for suffix, scheme in _SCHEMES:
        if name.endswith(suffix):
            return op, scheme
    return None


def _quant_params(node: Node, index: int, graph: str, bound: dict[str, str]) -> QuantParams | None:
    kind = _scheme(node.target)
    if kind is None:
        return None
    op, scheme = kind
    args: dict[str, Argument] = {named.name: named.arg for named in node.inputs}
    tensors: dict[str, ValueRef] = {}
    for name, arg in args.items():
        if isinstance(arg, ArgumentAsTensor):
            tensors[name] = ValueRef(value=arg.as_tensor.name, weight=bound.get(arg.as_tensor.name))
    source = tensors.pop("input", None)
    if source is None and node.inputs and isinstance(node.inputs[0].arg, ArgumentAsTensor):
        first = node.inputs[0]
        source = tensors.pop(first.name)
    if source is None:
        return None

    def pick(*names: str) -> Argument | None:
        return next((args[n] for n in names if n in args), None)

    scale = _number(pick("scale", "scales"))
    zero_arg = pick("zero_point", "zero_points")
    zero = _integer(zero_arg)
    qmin, qmax = _integer(pick("quant_min")), _integer(pick("quant_max"))
    if op == "quantize":
        dtype, out_dtype = _dtype(pick("dtype", "output_dtype")), None
    else:
        dtype, out_dtype = (
            _dtype(pick("dtype", "input_dtype")),
            _dtype(pick("out_dtype", "output_dtype")),
        )
    block = pick("block_size")
    outputs = node_outputs(node)
    return QuantParams(
        node=node_name(node, index),
        graph=graph,
        target=node.target,
        op=op,
        scheme=scheme,
        symmetric=_symmetric(zero_arg, zero, qmin, qmax),
        input=source,
        output=outputs[0] if outputs else None,
        scale=scale,
        zero_point=zero,
        axis=_integer(pick("axis")),
        group_size=_integer(pick("group_size")),
        block_size=list(block.as_ints) if isinstance(block, ArgumentAsInts) else None,
        quant_min=qmin,
        quant_max=qmax,
        dtype=dtype,
        out_dtype=out_dtype,
        tensors=tensors,
    )


def _number(arg: Argument | None) -> float | None:
    if isinstance(arg, ArgumentAsFloat):
        return float(arg.as_float)
    if isinstance(arg, ArgumentAsInt):
        return float(arg.as_int)
    return None


def _integer(arg: Argument | None) -> int | None:
    return arg.as_int if isinstance(arg, ArgumentAsInt) else None


def _dtype(arg: Argument | None) -> str | None:
    return dtype_name(arg.as_scalar_type) if isinstance(arg, ArgumentAsScalarType) else None


def _symmetric(
    zero_arg: Argument | None, zero: int | None, qmin: int | None, qmax: int | None
) -> bool | None:
    """Symmetric when the zero point sits mid-range (0 for int8, 128 for uint8); an absent
    zero point is 0; a zero point held in a tensor cannot be judged from the document."""
    if zero is None and isinstance(zero_arg, ArgumentAsNone):
        zero = 0
    if zero is None or qmin is None or qmax is None:
        return None
    return zero == (qmin + qmax + 1) // 2
