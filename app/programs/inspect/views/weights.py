"""Weights by kind and dtype, and the quantization parameters the graph carries."""

from __future__ import annotations

from app.programs.inspect.models import QuantParams, ValueRef, WeightStats
from app.programs.inspect.view import InspectRequest, Subject, View, megabytes
from app.programs.inspect.weights import weights

_PARAMETERS = ("scale", "zero_point", "axis", "group_size", "block_size", "dtype", "out_dtype")


def _run(subject: Subject, request: InspectRequest) -> WeightStats:
    return weights(subject.doc, subject.weights)


def _render(stats: WeightStats) -> str:
    lines = [f"{stats.total.count} tensors, {megabytes(stats.total.nbytes)}"]
    for tallies in (stats.by_kind, stats.by_dtype):
        for key, tally in tallies.items():
            lines.append(f"  {key:12} {tally.count:5}  {megabytes(tally.nbytes)}")
    lines += [_quant_line(q) for q in stats.quantized]
    return "\n".join(lines)


def _ref(value: ValueRef) -> str:
    return f"{value.value} (weight {value.weight})" if value.weight else value.value


def _quant_line(q: QuantParams) -> str:
    """One quantize or dequantize node's parameters as text."""
    fields = [f"{key}={getattr(q, key)}" for key in _PARAMETERS if getattr(q, key) is not None]
    if q.quant_min is not None or q.quant_max is not None:
        fields.append(f"range=[{q.quant_min}, {q.quant_max}]")
    if q.symmetric is not None:
        fields.append("symmetric" if q.symmetric else "asymmetric")
    fields += [f"{key}={_ref(value)}" for key, value in q.tensors.items()]
    return f"  {q.op} {q.scheme} {q.node} of {_ref(q.input)}: {', '.join(fields)}"


VIEW = View("weights", "weights by kind and dtype, and quantization", WeightStats, _run, _render)
