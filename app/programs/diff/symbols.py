"""Shape symbols under stable names, and values described for comparison: a tensor's dtype,
device and sizes, a symbol, a literal, with ranges where a dimension is symbolic.

A symbol's stable name is the first user input dimension that is exactly it (``x.shape[0]``),
so that ``s17`` in one export and ``s23`` in another compare equal when they stand for the
same dimension. Expressions are compared as text after that renaming, never evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from app.archive.tensors import dtype_name
from app.programs.expr import is_symbol_name
from app.programs.inspect.common import expression_text, size_text
from schema.models import (
    Argument,
    ArgumentAsBool,
    ArgumentAsCustomObj,
    ArgumentAsFloat,
    ArgumentAsInt,
    ArgumentAsNone,
    ArgumentAsString,
    ArgumentAsSymBool,
    ArgumentAsSymFloat,
    ArgumentAsSymInt,
    ArgumentAsTensor,
    ExportedProgram,
    Graph,
    InputSpecUserInput,
    RangeConstraint,
    SymBoolAsExpr,
    SymFloatAsExpr,
    SymIntAsExpr,
    TensorMeta,
)

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: (min, max) of a symbol; None is unbounded, as torch writes infinite bounds.
Bound = tuple[int | None, int | None]


def bound_text(bound: Bound | None) -> str:
    """``2..64``; an unbounded side is ``inf``, an unknown range ``?``."""
    if bound is None:
        return "?"
    low, high = bound
    return f"{'-inf' if low is None else low}..{'inf' if high is None else high}"


def contains(outer: Bound | None, inner: Bound | None) -> bool:
    """Whether the range `outer` covers `inner` (an unknown range covers nothing)."""
    if outer is None or inner is None:
        return False
    lo_ok = outer[0] is None or (inner[0] is not None and outer[0] <= inner[0])
    hi_ok = outer[1] is None or (inner[1] is not None and outer[1] >= inner[1])
    return lo_ok and hi_ok


class Symbols:
    """Stable names and ranges of one program's shape symbols."""

    def __init__(self, doc: ExportedProgram, inputs: Mapping[str, str] | None = None) -> None:
        """`inputs` renames user inputs (new name -> old) so both sides share stable names."""
        self.ranges: dict[str, RangeConstraint] = doc.range_constraints
        self.names: dict[str, str] = {}
        graph = doc.graph_module.graph
        renamed = inputs or {}
        for spec in doc.graph_module.signature.input_specs:
            if not isinstance(spec, InputSpecUserInput):
                continue
            arg = spec.user_input.arg
            if isinstance(arg, ArgumentAsTensor):
                name = arg.as_tensor.name
                meta = graph.tensor_values.get(name)
                for d, size in enumerate(meta.sizes if meta is not None else ()):
                    if isinstance(size, SymIntAsExpr):
                        self._name(size.as_expr.expr_str, f"{renamed.get(name, name)}.shape[{d}]")
            elif isinstance(arg, ArgumentAsSymInt) and arg.as_sym_int.kind == "as_name":
                name = arg.as_sym_int.value
                value = graph.sym_int_values.get(name)
                if isinstance(value, SymIntAsExpr):
                    self._name(value.as_expr.expr_str, renamed.get(name, name))

    def _name(self, expr_str: str, stable: str) -> None:
        text = expression_text(expr_str)
        if is_symbol_name(text):
            self.names.setdefault(text, stable)

    def key(self, text: str) -> str:
        """`text` with every symbol replaced by its stable name."""
        return _WORD.sub(lambda m: self.names.get(m.group(0), m.group(0)), text)

    def stable(self, symbol: str) -> str:
        """A symbol's stable name (itself when no user input dimension is exactly it)."""
        return self.names.get(symbol, symbol)

    def bound(self, symbol: str) -> Bound | None:
        """A symbol's range constraint, None when the program has none for it."""
        found = self.ranges.get(symbol)
        return None if found is None else (found.min_val, found.max_val)

    def dim(self, text: str) -> Dim:
        """One dimension or symbolic value, given as expression text."""
        symbols = tuple(
            (self.stable(word), word, self.bound(word))
            for word in dict.fromkeys(_WORD.findall(text))
            if is_symbol_name(word)
        )
        return Dim(self.key(text), text, symbols)


@dataclass(frozen=True)
class Dim:
    """A dimension: its stable key, its text as written, and its symbols with their ranges."""

    key: str
    text: str
    symbols: tuple[tuple[str, str, Bound | None], ...] = ()

    @property
    def static(self) -> int | None:
        """The size when it is a plain integer."""
        return int(self.text) if self.text.lstrip("-").isdigit() else None

    def rendered(self) -> str:
        """``s17:2..64`` for a symbol, ``2*s17 (s17:2..64)`` for an expression, else the size."""
        if not self.symbols:
            return self.text
        if len(self.symbols) == 1 and self.text == self.symbols[0][1]:
            return f"{self.text}:{bound_text(self.symbols[0][2])}"
        ranges = ", ".join(f"{raw}:{bound_text(b)}" for _, raw, b in self.symbols)
        return f"{self.text} ({ranges})"


@dataclass(frozen=True)
class ValueDesc:
    """What a caller sees of one input or output value."""

    kind: str
    dtype: str | None = None
    device: str | None = None
    dims: tuple[Dim, ...] | None = None
    literal: str | None = None

    def key(self) -> tuple[object, ...]:
        """Everything that makes two descriptions equal, ranges included, raw names not."""
        dims = (
            None
            if self.dims is None
            else tuple((d.key, tuple((s, b) for s, _, b in d.symbols)) for d in self.dims)
        )
        return (self.kind, self.dtype, self.device, dims, self.literal)

    def text(self) -> str:
        """``float32[s17:2..64, 7]``, ``SymInt 2*s17 (s17:2..64)``, ``constant 3``."""
        if self.kind == "tensor":
            dims = "?" if self.dims is None else ", ".join(d.rendered() for d in self.dims)
            device = "" if self.device in (None, "cpu") else f" on {self.device}"
            return f"{self.dtype}[{dims}]{device}"
        if self.dims:
            return f"{self.kind} {self.dims[0].rendered()}"
        return self.kind if self.literal is None else f"{self.kind} {self.literal}"


def _device(meta: TensorMeta) -> str:
    index = meta.device.index
    return meta.device.type if index is None else f"{meta.device.type}:{index}"


def tensor_desc(meta: TensorMeta, symbols: Symbols) -> ValueDesc:
    """A tensor's dtype, device and dimensions."""
    return ValueDesc(
        kind="tensor",
        dtype=dtype_name(meta.dtype),
        device=_device(meta),
        dims=tuple(symbols.dim(size_text(s)) for s in meta.sizes),
    )


def value_desc(graph: Graph, name: str, symbols: Symbols) -> ValueDesc | None:
    """The description of a named value of `graph`, None when no value map has it."""
    meta = graph.tensor_values.get(name)
    if meta is not None:
        return tensor_desc(meta, symbols)
    for kind, values in (
        ("SymInt", graph.sym_int_values),
        ("SymFloat", graph.sym_float_values),
        ("SymBool", graph.sym_bool_values),
    ):
        value = values.get(name)
        if value is None:
            continue
        if isinstance(value, SymIntAsExpr | SymFloatAsExpr | SymBoolAsExpr):
            return ValueDesc(kind, dims=(symbols.dim(expression_text(value.as_expr.expr_str)),))
        return ValueDesc(kind, literal=repr(value.value))
    obj = graph.custom_obj_values.get(name)
    if obj is not None:
        return ValueDesc("object", literal=obj.class_fqn)
    return None


_LITERALS = (ArgumentAsNone, ArgumentAsInt, ArgumentAsFloat, ArgumentAsBool, ArgumentAsString)


def argument_desc(arg: Argument, graph: Graph, symbols: Symbols) -> ValueDesc:
    """What a caller sees of one signature argument."""
    if isinstance(arg, ArgumentAsTensor):
        found = value_desc(graph, arg.as_tensor.name, symbols)
        return found if found is not None else ValueDesc("tensor")
    if isinstance(arg, ArgumentAsSymInt | ArgumentAsSymFloat | ArgumentAsSymBool):
        inner = arg.value
        kind = {"as_sym_int": "SymInt", "as_sym_float": "SymFloat"}.get(arg.kind, "SymBool")
        if inner.kind == "as_name":
            found = value_desc(graph, inner.value, symbols)
            return found if found is not None else ValueDesc(kind)
        return ValueDesc(kind, literal=repr(inner.value))
    if isinstance(arg, ArgumentAsCustomObj):
        return ValueDesc("object", literal=arg.as_custom_obj.class_fqn)
    if isinstance(arg, _LITERALS):
        literal = "None" if isinstance(arg, ArgumentAsNone) else repr(arg.value)
        return ValueDesc("constant", literal=literal)
    return ValueDesc(arg.kind)


# ---------------------------------------------------------------- inputs and outputs
