"""A short summary of a program for version listings: its inputs, outputs and parameter count."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

import schema
from app.archive.tensors import dtype_name
from app.programs.inspect import operators, size_value, weight_counts


class ValueSummary(BaseModel):
    """One user input or output: its kind (the argument's wire key) and, for a tensor, its meta."""

    name: str
    kind: str
    dtype: str | None = None
    #: sizes; a symbolic one as its expression with symbols unwrapped (``s0``, ``Mul(2, s0)``)
    shape: list[int | str] | None = None


class Summary(BaseModel):
    """What a program takes, returns and holds."""

    inputs: list[ValueSummary]
    outputs: list[ValueSummary]
    #: elements of every parameter, a tied one counted once (None when a parameter's size is
    #: symbolic without a hint)
    parameter_count: int | None
    parameters: int
    #: parameters tied to another (sharing its storage), in `parameters` but counted once in
    #: `parameter_count`; 0 for versions stored before it was recorded
    tied_parameters: int = 0
    buffers: int
    constants: int
    nodes: int
    #: operator namespaces the program calls into, subgraphs included (``aten``, ``my_ops``);
    #: empty for versions stored before it was recorded
    operator_namespaces: list[str] = []


def _value(arg: object, metas: dict[str, schema.TensorMeta]) -> ValueSummary:
    kind = str(getattr(arg, "kind", type(arg).__name__))
    inner = getattr(arg, "value", None)
    if isinstance(inner, schema.TensorArgument):
        meta = metas.get(inner.name)
        if meta is None:
            return ValueSummary(name=inner.name, kind=kind)
        return ValueSummary(
            name=inner.name,
            kind=kind,
            dtype=dtype_name(meta.dtype),
            shape=[size_value(s) for s in meta.sizes],
        )
    return ValueSummary(name=_name(inner), kind=kind)


def _name(inner: object) -> str:
    """A symbolic value's or object's name; a constant has none."""
    for attribute in ("name", "as_name"):
        name = getattr(inner, attribute, None)
        if isinstance(name, str):
            return name
    return ""


def summarize(doc: schema.ExportedProgram, tied: Mapping[str, str] | None = None) -> Summary:
    """The program's user inputs and outputs in signature order, and its weights tallied (a
    weight `tied` names, alias -> the weight it shares storage with, counted once)."""
    graph = doc.graph_module.graph
    signature = doc.graph_module.signature
    metas = dict(graph.tensor_values)
    inputs = [
        _value(spec.user_input.arg, metas)
        for spec in signature.input_specs
        if isinstance(spec, schema.InputSpecUserInput)
    ]
    outputs = [
        _value(spec.user_output.arg, metas)
        for spec in signature.output_specs
        if isinstance(spec, schema.OutputSpecUserOutput)
    ]
    counts = weight_counts(doc, tied)
    return Summary(
        inputs=inputs,
        outputs=outputs,
        parameter_count=counts.parameter_count,
        parameters=counts.parameters,
        tied_parameters=counts.tied_parameters,
        buffers=counts.buffers,
        constants=counts.constants,
        nodes=len(graph.nodes),
        operator_namespaces=sorted(operators(doc).total.by_namespace),
    )
