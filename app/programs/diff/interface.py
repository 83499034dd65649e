"""What callers see of a program: user inputs and outputs, shape symbols and their ranges.

Shape symbols get a stable name before anything is compared (`app.programs.diff.symbols`).

A change is breaking when a call the old program accepted may fail on the new one or return
something of another form: a wider input range, or a static input dimension that became
dynamic (covering the old size), is not; nor is an output range that merely follows an input
symbol's range. Any other change of an input or an output is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.programs.diff.models import InterfaceChange, InterfaceChangeKind, RangeChange
from app.programs.diff.symbols import (
    Bound,
    Dim,
    Symbols,
    ValueDesc,
    argument_desc,
    bound_text,
    contains,
)
from schema.models import (
    Argument,
    ArgumentAsCustomObj,
    ArgumentAsSymBool,
    ArgumentAsSymFloat,
    ArgumentAsSymInt,
    ArgumentAsTensor,
    ConstantValueAsNone,
    ExportedProgram,
    InputSpecConstantInput,
    InputSpecUserInput,
    OutputSpecBufferMutation,
    OutputSpecLossOutput,
    OutputSpecParameterMutation,
    OutputSpecUserInputMutation,
    OutputSpecUserOutput,
)


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
    changes.extend(_output_end(entry, "removed") for entry in old[len(new) :])
    changes.extend(_output_end(entry, "added") for entry in new[len(old) :])


def _output_end(entry: _Entry, change: Literal["removed", "added"]) -> InterfaceChange:
    """An output only one side has: every caller that unpacks the outputs breaks."""
    label, text = f"output {entry.position}", entry.desc.text()
    return InterfaceChange(
        side="output",
        change=change,
        name=label,
        old=text if change == "removed" else None,
        new=text if change == "added" else None,
        breaking=True,
        detail=f"{label} ({text}) was {change}",
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
    where = "dim" if old.kind == "tensor" else "value"
    shape, ranges = _dim_changes(old.dims, new.dims, where, is_input)
    if shape:
        found.append(
            change("shape", any(b for _, b in shape), "; ".join(text for text, _ in shape))
        )
    if ranges:
        found.append(
            change("dynamic-range", any(b for _, b in ranges), "; ".join(t for t, _ in ranges))
        )
    return found


#: A change's text and whether it breaks callers.
_Said = tuple[str, bool]


def _dim_changes(
    old: tuple[Dim, ...], new: tuple[Dim, ...], what: str, is_input: bool
) -> tuple[list[_Said], list[_Said]]:
    """Per dimension of two descriptions of equal rank: size changes, and range changes of
    the symbols of sizes that did not change (`what`: ``dim`` of a tensor, else ``value``)."""
    shape: list[_Said] = []
    ranges: list[_Said] = []
    for d, (a, b) in enumerate(zip(old, new, strict=True)):
        where = f"dim {d}" if what == "dim" else "value"
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
            and contains(b.symbols[0][2], (a.static, a.static))
        )
        shape.append(
            (
                f"{where} {a.rendered()} -> {b.rendered()}"
                + (" (now dynamic, covering the old size)" if loosened else ""),
                not loosened,
            )
        )
    return shape, ranges


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
    widened = contains(after, before)
    narrowed = contains(before, after)
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
