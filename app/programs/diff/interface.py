"""What callers see of a program: user inputs and outputs, shape symbols and their ranges.

Shape symbols get a stable name before anything is compared: the first user input dimension
that is exactly the symbol (``x.shape[0]``), so that ``s17`` in one export and ``s23`` in
another compare equal when they stand for the same dimension. Expressions are compared as
text after that renaming, never evaluated.

A change is breaking when a call the old program accepted may fail on the new one or return
something of another form: a wider input range, or a static input dimension that became
dynamic (covering the old size), is not; nor is an output range that merely follows an input
symbol's range. Any other change of an input or an output is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from app.archive.tensors import dtype_name
from app.programs.diff.models import InterfaceChange, InterfaceChangeKind, RangeChange
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
    ConstantValueAsNone,
    ExportedProgram,
    Graph,
    InputSpecConstantInput,
    InputSpecUserInput,
    OutputSpecBufferMutation,
    OutputSpecLossOutput,
    OutputSpecParameterMutation,
    OutputSpecUserInputMutation,
    OutputSpecUserOutput,
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


def _contains(outer: Bound | None, inner: Bound | None) -> bool:
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


@dataclass(frozen=True)
class _Entry:
    position: int
    name: str | None
    desc: ValueDesc

    @property
    def label(self) -> str:
        return self.name if self.name is not None else f"input {self.position}"


def _user_inputs(doc: ExportedProgram, symbols: Symbols | None) -> list[_Entry]:
    """The user inputs in order; without `symbols`, names and positions only."""
    graph = doc.graph_module.graph
    found: list[_Entry] = []
    for spec in doc.graph_module.signature.input_specs:
        if isinstance(spec, InputSpecUserInput):
            arg = spec.user_input.arg
            names = _names(arg)
            desc = _UNKNOWN if symbols is None else argument_desc(arg, graph, symbols)
            found.append(_Entry(len(found), names[0] if len(names) == 1 else None, desc))
        elif isinstance(spec, InputSpecConstantInput):
            value = spec.constant_input.value
            literal = "None" if isinstance(value, ConstantValueAsNone) else repr(value.value)
            desc = ValueDesc("constant", literal=literal)
            found.append(_Entry(len(found), spec.constant_input.name, desc))
    return found


_UNKNOWN = ValueDesc("unknown")


@dataclass(frozen=True)
class InputMatch:
    """Which new user input stands for which old one, by position."""

    by_name: list[tuple[int, int]]
    #: same position, another name.
    renamed: list[tuple[int, int]]
    removed: list[int]
    added: list[int]
    #: new input value name -> old one, for every matched pair with names.
    names: dict[str, str]


def match_inputs(old: ExportedProgram, new: ExportedProgram) -> InputMatch:
    """Pair user inputs by name, then the rest by position (a rename); others added/removed."""
    before, after = _user_inputs(old, None), _user_inputs(new, None)
    old_by_name = {e.name: e.position for e in before if e.name is not None}
    new_names = {e.name for e in after if e.name is not None}
    by_name = [
        (old_by_name[e.name], e.position)
        for e in after
        if e.name is not None and e.name in old_by_name
    ]
    taken_old = {o for o, _ in by_name}
    taken_new = {n for _, n in by_name}
    left_old = {e.position: e for e in before if e.position not in taken_old}
    renamed: list[tuple[int, int]] = []
    for entry in after:
        partner = left_old.get(entry.position)
        if (
            entry.position not in taken_new
            and partner is not None
            and (partner.name is None or partner.name not in new_names)
        ):
            renamed.append((partner.position, entry.position))
            del left_old[entry.position]
    matched_new = taken_new | {n for _, n in renamed}
    names: dict[str, str] = {}
    for o, n in [*by_name, *renamed]:
        old_name, new_name = before[o].name, after[n].name
        if old_name is not None and new_name is not None:
            names[new_name] = old_name
    return InputMatch(
        by_name=by_name,
        renamed=renamed,
        removed=sorted(left_old),
        added=[e.position for e in after if e.position not in matched_new],
        names=names,
    )


def _names(arg: Argument) -> list[str]:
    if isinstance(arg, ArgumentAsTensor):
        return [arg.as_tensor.name]
    if isinstance(arg, ArgumentAsSymInt | ArgumentAsSymFloat | ArgumentAsSymBool):
        return [arg.value.value] if arg.value.kind == "as_name" else []
    if isinstance(arg, ArgumentAsCustomObj):
        return [arg.as_custom_obj.name]
    return []


def _user_outputs(doc: ExportedProgram, symbols: Symbols) -> list[_Entry]:
    graph = doc.graph_module.graph
    found: list[_Entry] = []
    for spec in doc.graph_module.signature.output_specs:
        if isinstance(spec, OutputSpecUserOutput):
            arg: Argument = spec.user_output.arg
        elif isinstance(spec, OutputSpecLossOutput):
            arg = ArgumentAsTensor(as_tensor=spec.loss_output.arg)
        else:
            continue
        names = _names(arg)
        found.append(
            _Entry(len(found), names[0] if names else None, argument_desc(arg, graph, symbols))
        )
    return found


def _mutations(doc: ExportedProgram) -> dict[str, str]:
    """Mutated state: ``buffer:<fqn>``/``parameter:<fqn>``/``input:<name>`` -> its kind."""
    found: dict[str, str] = {}
    for spec in doc.graph_module.signature.output_specs:
        if isinstance(spec, OutputSpecBufferMutation):
            found[f"buffer {spec.buffer_mutation.buffer_name}"] = "buffer"
        elif isinstance(spec, OutputSpecParameterMutation):
            found[f"parameter {spec.parameter_mutation.parameter_name}"] = "parameter"
        elif isinstance(spec, OutputSpecUserInputMutation):
            found[f"input {spec.user_input_mutation.user_input_name}"] = "input"
    return found


def _root_specs(doc: ExportedProgram) -> tuple[str, str] | None:
    for entry in doc.graph_module.module_call_graph:
        if entry.fqn == "" and entry.signature is not None:
            return entry.signature.in_spec, entry.signature.out_spec
    return None


def compare_interface(
    old: ExportedProgram,
    new: ExportedProgram,
    old_symbols: Symbols,
    new_symbols: Symbols,
    inputs: InputMatch,
) -> list[InterfaceChange]:
    """User inputs, user outputs, mutated state and pytree structure, old against new."""
    changes: list[InterfaceChange] = []
    _compare_inputs(_user_inputs(old, old_symbols), _user_inputs(new, new_symbols), inputs, changes)
    _compare_outputs(_user_outputs(old, old_symbols), _user_outputs(new, new_symbols), changes)
    _compare_mutations(_mutations(old), _mutations(new), inputs.names, changes)
    old_specs, new_specs = _root_specs(old), _root_specs(new)
    if old_specs is not None and new_specs is not None:
        for side, before, after in (
            ("input", old_specs[0], new_specs[0]),
            ("output", old_specs[1], new_specs[1]),
        ):
            if before != after:
                changes.append(
                    InterfaceChange(
                        side="input" if side == "input" else "output",
                        change="structure",
                        name=f"{side}s",
                        breaking=True,
                        detail=f"the pytree structure of the {side}s changed",
                    )
                )
    return changes


def _compare_inputs(
    old: list[_Entry], new: list[_Entry], match: InputMatch, changes: list[InterfaceChange]
) -> None:
    order_old = [o for o, _ in sorted(match.by_name, key=lambda p: p[1])]
    moved = order_old != sorted(order_old)
    for o, n in match.by_name:
        a, b = old[o], new[n]
        if moved and o != n:
            changes.append(
                _input(
                    "moved",
                    b.label,
                    str(o),
                    str(n),
                    True,
                    f"input {b.label!r} moved from position {o} to {n}",
                )
            )
        changes.extend(_value_changes("input", b.label, a.desc, b.desc))
    for o, n in match.renamed:
        a, b = old[o], new[n]
        changes.append(
            _input(
                "renamed",
                b.label,
                a.label,
                b.label,
                True,
                f"input {n} is now called {b.label!r} instead of {a.label!r}",
            )
        )
        changes.extend(_value_changes("input", b.label, a.desc, b.desc))
    for o in match.removed:
        entry = old[o]
        changes.append(
            _input(
                "removed",
                entry.label,
                entry.desc.text(),
                None,
                True,
                f"input {entry.label!r} ({entry.desc.text()}) was removed",
            )
        )
    for n in match.added:
        entry = new[n]
        changes.append(
            _input(
                "added",
                entry.label,
                None,
                entry.desc.text(),
                True,
                f"input {entry.label!r} ({entry.desc.text()}) was added",
            )
        )


def _input(
    change: InterfaceChangeKind,
    name: str,
    old: str | None,
    new: str | None,
    breaking: bool,
    detail: str,
) -> InterfaceChange:
    return InterfaceChange(
        side="input", change=change, name=name, old=old, new=new, breaking=breaking, detail=detail
    )


def _compare_outputs(old: list[_Entry], new: list[_Entry], changes: list[InterfaceChange]) -> None:
    for o, n in zip(old, new, strict=False):
        changes.extend(_value_changes("output", f"output {n.position}", o.desc, n.desc))
    for entry in old[len(new) :]:
        label = f"output {entry.position}"
        changes.append(
            InterfaceChange(
                side="output",
                change="removed",
                name=label,
                old=entry.desc.text(),
                breaking=True,
                detail=f"{label} ({entry.desc.text()}) was removed",
            )
        )
    for entry in new[len(old) :]:
        label = f"output {entry.position}"
        changes.append(
            InterfaceChange(
                side="output",
                change="added",
                name=label,
                new=entry.desc.text(),
                breaking=True,
                detail=f"{label} ({entry.desc.text()}) was added",
            )
        )


def _compare_mutations(
    old: dict[str, str],
    new: dict[str, str],
    inputs: dict[str, str],
    changes: list[InterfaceChange],
) -> None:
    def old_name(key: str) -> str:
        kind, _, name = key.partition(" ")
        return f"input {inputs.get(name, name)}" if kind == "input" else key

    renamed_new = {old_name(k): k for k in new}
    for key, kind in old.items():
        if key not in renamed_new:
            changes.append(
                InterfaceChange(
                    side="output",
                    change="mutation-removed",
                    name=key,
                    breaking=kind == "input",
                    detail=f"the program no longer mutates {key}",
                )
            )
    for stable, key in renamed_new.items():
        if stable not in old:
            changes.append(
                InterfaceChange(
                    side="output",
                    change="mutation-added",
                    name=key,
                    breaking=new[key] == "input",
                    detail=f"the program now mutates {key}",
                )
            )


def _value_changes(side: str, label: str, old: ValueDesc, new: ValueDesc) -> list[InterfaceChange]:
    """The changes between two descriptions of one input or output."""
    if old.key() == new.key():
        return []
    before, after = old.text(), new.text()
    is_input = side == "input"

    def change(kind: InterfaceChangeKind, breaking: bool, detail: str) -> InterfaceChange:
        return InterfaceChange(
            side="input" if is_input else "output",
            change=kind,
            name=label,
            old=before,
            new=after,
            breaking=breaking,
            detail=f"{side} {label!r}: {detail}" if is_input else f"{label}: {detail}",
        )

    if old.kind != new.kind:
        return [change("kind", True, f"{old.kind} -> {new.kind}")]
    found: list[InterfaceChange] = []
    if old.literal != new.literal:
        found.append(change("value", True, f"{old.literal} -> {new.literal}"))
    if old.dtype != new.dtype:
        found.append(change("dtype", True, f"dtype {old.dtype} -> {new.dtype}"))
    if old.device != new.device:
        found.append(change("device", True, f"device {old.device} -> {new.device}"))
    if old.dims is None or new.dims is None or old.dims == new.dims:
        return found
    if len(old.dims) != len(new.dims):
        found.append(
            change("shape", True, f"rank {len(old.dims)} -> {len(new.dims)} ({before} -> {after})")
        )
        return found
    shape: list[tuple[str, bool]] = []
    ranges: list[tuple[str, bool]] = []
    for d, (a, b) in enumerate(zip(old.dims, new.dims, strict=True)):
        where = f"dim {d}" if old.kind == "tensor" else "value"
        if a.key == b.key:
            for (stable, raw, bound_a), (_, _, bound_b) in zip(a.symbols, b.symbols, strict=True):
                if bound_a != bound_b:
                    ranges.append(
                        _range_change(where, stable, stable != raw, bound_a, bound_b, is_input)
                    )
            continue
        loosened = (
            is_input
            and a.static is not None
            and len(b.symbols) == 1
            and b.text == b.symbols[0][1]
            and _contains(b.symbols[0][2], (a.static, a.static))
        )
        shape.append(
            (
                f"{where} {a.rendered()} -> {b.rendered()}"
                + (" (now dynamic, covering the old size)" if loosened else ""),
                not loosened,
            )
        )
    if shape:
        found.append(
            change("shape", any(b for _, b in shape), "; ".join(text for text, _ in shape))
        )
    if ranges:
        found.append(
            change("dynamic-range", any(b for _, b in ranges), "; ".join(t for t, _ in ranges))
        )
    return found


def _range_change(
    where: str,
    stable: str,
    from_input: bool,
    before: Bound | None,
    after: Bound | None,
    is_input: bool,
) -> tuple[str, bool]:
    """A symbol's range change in one dimension: its text, and whether it breaks callers.

    Callers choose the sizes of input symbols: a wider input range accepts every old call,
    and output dimensions over input symbols follow the inputs, so only the input side of
    such a change can break a call. An output symbol no input defines (a data-dependent
    size) breaks callers when its range is not narrower than before.
    """
    widened = _contains(after, before)
    narrowed = _contains(before, after)
    how = " widened" if widened else " narrowed" if narrowed else ""
    text = f"{where} ({stable}) range {bound_text(before)} -> {bound_text(after)}{how}"
    if is_input:
        return text, not widened
    return text, not from_input and not narrowed


# ---------------------------------------------------------------- range constraints


def compare_ranges(old: Symbols, new: Symbols) -> list[RangeChange]:
    """Range constraints added, removed or changed, matched by the symbols' stable names."""
    before = {old.stable(sym): (sym, (rc.min_val, rc.max_val)) for sym, rc in old.ranges.items()}
    after = {new.stable(sym): (sym, (rc.min_val, rc.max_val)) for sym, rc in new.ranges.items()}
    found: list[RangeChange] = []
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key), after.get(key)
        if a is not None and b is not None:
            if a[1] != b[1]:
                found.append(
                    RangeChange(
                        symbol=key,
                        change="changed",
                        old_name=a[0],
                        new_name=b[0],
                        old=bound_text(a[1]),
                        new=bound_text(b[1]),
                    )
                )
        elif a is not None:
            found.append(
                RangeChange(symbol=key, change="removed", old_name=a[0], old=bound_text(a[1]))
            )
        elif b is not None:
            found.append(
                RangeChange(symbol=key, change="added", new_name=b[0], new=bound_text(b[1]))
            )
    return found
