"""What changed between two exported programs: nodes, interface, weights, ranges, opsets, modules.

`diff_programs` compares two documents, and their stored tensors when a `WeightSource` is
given for each side; `diff_sources` reads both sides of a request the way every operation
does. The result's summary is one of:

- ``identical``: nothing differs (weights included when both sides came with them);
- ``same-graph-new-weights``: only stored tensor values (or their layout) differ;
- ``compatible``: the program changed, but every call the old one accepted still works;
- ``breaking``: some interface change may break a caller.

Nodes are aligned structurally (`app.programs.diff_nodes`), so names, node metadata and the
order torch happened to emit never count as changes; nor do the Python modules the model's
classes were defined in (module types are compared by class name), nor a different torch
version alone (reported, but no verdict changes for it).
"""

from __future__ import annotations

from app.programs.diff_interface import Symbols, compare_interface, compare_ranges, match_inputs
from app.programs.diff_models import (
    ArgumentChange,
    Counts,
    FieldChange,
    GraphDiff,
    InterfaceChange,
    ModuleChange,
    NodeChange,
    NodeRef,
    OpsetChange,
    ProgramDiff,
    RangeChange,
    Summary,
    ValueStats,
    Verdict,
    WeightChange,
)
from app.programs.diff_nodes import Ref, Sides, build_graph, canonical_graph, diff_graphs
from app.programs.diff_weights import (
    ArchiveWeights,
    RawWeights,
    StoredTensor,
    WeightSource,
    compare_weights,
)
from app.programs.inspect import InspectFailure, module_tree
from app.programs.inspect_common import argument_values
from schema.io import no_cycle_collection
from schema.models import (
    ExportedProgram,
    InputSpecBuffer,
    InputSpecCustomObj,
    InputSpecParameter,
    InputSpecTensorConstant,
    InputSpecToken,
    InputSpecUserInput,
)

__all__ = [
    "ArchiveWeights",
    "ArgumentChange",
    "Counts",
    "FieldChange",
    "GraphDiff",
    "InterfaceChange",
    "ModuleChange",
    "NodeChange",
    "NodeRef",
    "OpsetChange",
    "ProgramDiff",
    "RangeChange",
    "RawWeights",
    "StoredTensor",
    "Summary",
    "ValueStats",
    "Verdict",
    "WeightChange",
    "WeightSource",
    "diff_programs",
    "render_text",
]

#: Weight changes that alter the program's structure (the rest are new stored values).
_RESHAPED = {"renamed", "kind", "persistent", "dtype", "shape"}
_STRUCTURAL = {"added", "removed", *_RESHAPED}


def diff_programs(
    old: ExportedProgram,
    new: ExportedProgram,
    old_weights: WeightSource | None = None,
    new_weights: WeightSource | None = None,
    written_as: tuple[str, str] | None = None,
) -> ProgramDiff:
    """Everything that changed from `old` to `new` (values too, when both have weights);
    `written_as` gives the schema versions the two documents had before they were upgraded."""
    with no_cycle_collection():
        return _diff(old, new, old_weights, new_weights, written_as)


def _diff(
    old: ExportedProgram,
    new: ExportedProgram,
    old_weights: WeightSource | None,
    new_weights: WeightSource | None,
    read_versions: tuple[str, str] | None,
) -> ProgramDiff:
    old_canonical, new_canonical = canonical_graph(old), canonical_graph(new)
    inputs = match_inputs(old, new)
    old_symbols, new_symbols = Symbols(old), Symbols(new, inputs.names)
    interface = compare_interface(old, new, old_symbols, new_symbols, inputs)
    weights = compare_weights(old, new, old_weights, new_weights)
    old_graph = build_graph(old.graph_module.graph, old_canonical, "", _input_refs(old, None, {}))
    new_graph = build_graph(
        new.graph_module.graph,
        new_canonical,
        "",
        _input_refs(new, inputs.names, weights.renamed),
    )
    graph = diff_graphs(old_graph, new_graph, Sides(old_symbols, new_symbols))
    modules, notes = _modules(old, new)
    notes.extend(weights.notes)
    diff = ProgramDiff(
        summary=Summary(verdict="identical", counts=Counts(), weights_compared=False, text=""),
        graph=graph,
        interface=interface,
        parameters=[c for c in weights.changes if c.kind == "parameter"],
        buffers=[c for c in weights.changes if c.kind == "buffer"],
        constants=[c for c in weights.changes if c.kind == "constant"],
        range_constraints=compare_ranges(old_symbols, new_symbols),
        opsets=_opsets(old, new),
        modules=modules,
        fields=_fields(old, new, read_versions),
        notes=notes,
    )
    compared = old_weights is not None and new_weights is not None
    if not compared:
        diff.notes.append("stored tensor values were not compared: a side has no weights")
    diff.summary = _summary(diff, compared)
    return diff


def _input_refs(
    doc: ExportedProgram, users: dict[str, str] | None, renamed: dict[str, str]
) -> dict[str, Ref]:
    """Graph input value -> identity; the new side's user inputs and weights in old names."""
    refs: dict[str, Ref] = {}
    for k, spec in enumerate(doc.graph_module.signature.input_specs):
        if isinstance(spec, InputSpecUserInput):
            for name in argument_values(spec.user_input.arg):
                if users is None:
                    refs[name] = ("in", "user", name)
                elif name in users:
                    refs[name] = ("in", "user", users[name])
                else:
                    refs[name] = ("in", "new user", name)
        elif isinstance(spec, InputSpecParameter):
            fqn = spec.parameter.parameter_name
            refs[spec.parameter.arg.name] = ("in", "weight", renamed.get(fqn, fqn))
        elif isinstance(spec, InputSpecBuffer):
            fqn = spec.buffer.buffer_name
            refs[spec.buffer.arg.name] = ("in", "weight", renamed.get(fqn, fqn))
        elif isinstance(spec, InputSpecTensorConstant):
            fqn = spec.tensor_constant.tensor_constant_name
            refs[spec.tensor_constant.arg.name] = ("in", "weight", renamed.get(fqn, fqn))
        elif isinstance(spec, InputSpecCustomObj):
            refs[spec.custom_obj.arg.name] = ("in", "object", spec.custom_obj.custom_obj_name)
        elif isinstance(spec, InputSpecToken):
            refs[spec.token.arg.name] = ("in", "token", k)
    return refs


def _class_name(type_name: str | None) -> str | None:
    return None if type_name is None else type_name.rsplit(".", 1)[-1]


def _modules(old: ExportedProgram, new: ExportedProgram) -> tuple[list[ModuleChange], list[str]]:
    try:
        before = {m.path: m for m in module_tree(old).modules}
        after = {m.path: m for m in module_tree(new).modules}
    except InspectFailure as exc:
        return [], [f"module trees were not compared: {exc}"]
    found: list[ModuleChange] = []
    for path, module in before.items():
        if path not in after:
            found.append(ModuleChange(path=path, change="removed", old_type=module.type))
    for path, module in after.items():
        previous = before.get(path)
        if previous is None:
            found.append(ModuleChange(path=path, change="added", new_type=module.type))
        elif (
            previous.type is not None
            and module.type is not None
            and _class_name(previous.type) != _class_name(module.type)
        ):
            found.append(
                ModuleChange(path=path, change="type", old_type=previous.type, new_type=module.type)
            )
    return found, []


def _opsets(old: ExportedProgram, new: ExportedProgram) -> list[OpsetChange]:
    a, b = old.opset_version, new.opset_version
    return [
        OpsetChange(namespace=ns, old=a.get(ns), new=b.get(ns))
        for ns in sorted(a.keys() | b.keys())
        if a.get(ns) != b.get(ns)
    ]


def _fields(
    old: ExportedProgram, new: ExportedProgram, read_versions: tuple[str, str] | None
) -> list[FieldChange]:
    def version(doc: ExportedProgram) -> str:
        return f"{doc.schema_version.major}.{doc.schema_version.minor}"

    found: list[FieldChange] = []
    versions = read_versions or (version(old), version(new))
    if versions[0] != versions[1]:
        found.append(FieldChange(field="schema_version", old=versions[0], new=versions[1]))
    if old.torch_version != new.torch_version:
        found.append(
            FieldChange(field="torch_version", old=old.torch_version, new=new.torch_version)
        )
    if old.verifiers != new.verifiers:
        found.append(
            FieldChange(
                field="verifiers", old=", ".join(old.verifiers), new=", ".join(new.verifiers)
            )
        )
    if sorted(old.guards_code) != sorted(new.guards_code):
        found.append(
            FieldChange(
                field="guards_code",
                old="; ".join(sorted(old.guards_code)),
                new="; ".join(sorted(new.guards_code)),
            )
        )
    return found


# ---------------------------------------------------------------- summary


def _weight_changes(diff: ProgramDiff) -> list[WeightChange]:
    return [*diff.parameters, *diff.buffers, *diff.constants]


def _counts(diff: ProgramDiff) -> Counts:
    weights = _weight_changes(diff)
    return Counts(
        nodes_added=len(diff.graph.added),
        nodes_removed=len(diff.graph.removed),
        nodes_changed=len(diff.graph.changed),
        nodes_unchanged=diff.graph.unchanged,
        interface_changes=len(diff.interface),
        breaking_changes=sum(c.breaking for c in diff.interface),
        weights_added=sum("added" in w.changes for w in weights),
        weights_removed=sum("removed" in w.changes for w in weights),
        weights_changed=sum(bool(_RESHAPED.intersection(w.changes)) for w in weights),
        weights_new_values=sum(not _STRUCTURAL.intersection(w.changes) for w in weights),
        range_constraints_changed=len(diff.range_constraints),
        opsets_changed=len(diff.opsets),
        modules_changed=len(diff.modules),
    )


def _summary(diff: ProgramDiff, compared: bool) -> Summary:
    counts = _counts(diff)
    structural = (
        counts.nodes_added
        or counts.nodes_removed
        or counts.nodes_changed
        or counts.interface_changes
        or counts.weights_added
        or counts.weights_removed
        or counts.weights_changed
        or counts.range_constraints_changed
        or counts.opsets_changed
        or counts.modules_changed
        or any(f.field != "torch_version" for f in diff.fields)
    )
    verdict: Verdict
    if counts.breaking_changes:
        verdict = "breaking"
    elif structural:
        verdict = "compatible"
    elif counts.weights_new_values:
        verdict = "same-graph-new-weights"
    else:
        verdict = "identical"
    return Summary(
        verdict=verdict,
        counts=counts,
        weights_compared=compared,
        text=_line(verdict, counts, compared, diff),
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _line(verdict: Verdict, c: Counts, compared: bool, diff: ProgramDiff) -> str:
    parts: list[str] = []
    if c.breaking_changes:
        parts.append(f"{_plural(c.breaking_changes, 'breaking interface change')}")
    if c.interface_changes - c.breaking_changes:
        parts.append(
            _plural(c.interface_changes - c.breaking_changes, "compatible interface change")
        )
    if c.nodes_added or c.nodes_removed or c.nodes_changed:
        parts.append(
            f"nodes: {c.nodes_added} added, {c.nodes_removed} removed, {c.nodes_changed} changed"
        )
    if c.weights_added or c.weights_removed or c.weights_changed:
        parts.append(
            f"weights: {c.weights_added} added, {c.weights_removed} removed, "
            f"{c.weights_changed} changed"
        )
    if c.weights_new_values:
        names = [w.name for w in _weight_changes(diff) if not _STRUCTURAL.intersection(w.changes)]
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        parts.append(f"{_plural(c.weights_new_values, 'tensor')} with new values ({shown})")
    if c.range_constraints_changed:
        parts.append(_plural(c.range_constraints_changed, "range constraint change"))
    if c.opsets_changed:
        parts.append(_plural(c.opsets_changed, "opset change"))
    if c.modules_changed:
        parts.append(_plural(c.modules_changed, "module change"))
    parts.extend(
        f"{f.field} {f.old} -> {f.new}" for f in diff.fields if f.field == "schema_version"
    )
    body = "; ".join(parts) if parts else "no differences"
    tail = "" if compared else " (stored tensor values not compared)"
    return f"{verdict}: {body}{tail}"


# ---------------------------------------------------------------- text


def render_text(diff: ProgramDiff) -> str:
    """The diff as a readable multi-line report, the way the command line prints it."""
    lines = [diff.summary.text]
    if diff.interface:
        breaking = sum(c.breaking for c in diff.interface)
        lines.append(f"interface ({_plural(len(diff.interface), 'change')}, {breaking} breaking):")
        for change in diff.interface:
            mark = "!" if change.breaking else "~"
            lines.append(f"  {mark} {change.detail}")
            if change.old is not None or change.new is not None:
                lines.append(f"      {change.old or '-'} -> {change.new or '-'}")
    lines.extend(_graph_lines(diff.graph, "  ", "nodes"))
    for title, changes in (
        ("parameters", diff.parameters),
        ("buffers", diff.buffers),
        ("constants", diff.constants),
    ):
        if changes:
            lines.append(f"{title}:")
            lines.extend(f"  {_weight_line(w)}" for w in changes)
    if diff.range_constraints:
        lines.append("range constraints:")
        for r in diff.range_constraints:
            mark = {"added": "+", "removed": "-", "changed": "~"}[r.change]
            names = " / ".join(dict.fromkeys(n for n in (r.old_name, r.new_name) if n))
            lines.append(f"  {mark} {r.symbol} ({names}): {r.old or '-'} -> {r.new or '-'}")
    if diff.opsets:
        lines.append("opsets:")
        lines.extend(f"  ~ {o.namespace}: {o.old} -> {o.new}" for o in diff.opsets)
    if diff.modules:
        lines.append("modules:")
        for m in diff.modules:
            if m.change == "added":
                lines.append(f"  + {m.path or '<root>'} ({m.new_type})")
            elif m.change == "removed":
                lines.append(f"  - {m.path or '<root>'} ({m.old_type})")
            else:
                lines.append(f"  ~ {m.path or '<root>'}: {m.old_type} -> {m.new_type}")
    if diff.fields:
        lines.append("program fields:")
        lines.extend(f"  ~ {f.field}: {f.old} -> {f.new}" for f in diff.fields)
    if diff.notes:
        lines.append("notes:")
        lines.extend(f"  - {note}" for note in diff.notes)
    return "\n".join(lines) + "\n"


def _node(ref: NodeRef) -> str:
    return f"{ref.target} -> {', '.join(ref.outputs) or '()'}"


def _graph_lines(graph: GraphDiff, indent: str, title: str) -> list[str]:
    head = indent[:-2]
    lines = [
        f"{head}{title}: {graph.old_nodes} -> {graph.new_nodes} ({len(graph.added)} added, "
        f"{len(graph.removed)} removed, {len(graph.changed)} changed, "
        f"{graph.unchanged} unchanged)"
    ]
    lines.extend(f"{indent}+ {_node(r)}" for r in graph.added)
    lines.extend(f"{indent}- {_node(r)}" for r in graph.removed)
    for change in graph.changed:
        old_outputs = ", ".join(change.old.outputs) or "()"
        new_outputs = ", ".join(change.new.outputs) or "()"
        target = (
            f"{change.old.target} => {change.new.target}"
            if change.target_changed
            else change.new.target
        )
        lines.append(f"{indent}~ {target}: {old_outputs} -> {new_outputs}")
        for arg in change.arguments:
            label = arg.name or f"argument {arg.position}"
            lines.append(f"{indent}    {label}: {arg.old or '-'} -> {arg.new or '-'}")
        for out in change.outputs:
            lines.append(f"{indent}    output {out.position}: {out.old or '-'} -> {out.new or '-'}")
        for sub in change.subgraphs:
            lines.extend(_graph_lines(sub, indent + "      ", f"subgraph {sub.name}"))
    return lines


def _weight_line(w: WeightChange) -> str:
    def tensor(dtype: str | None, shape: list[int] | None) -> str:
        return f"{dtype or '?'}{'?' if shape is None else list(shape)}"

    if w.changes == ["added"]:
        return f"+ {w.name} {tensor(w.new_dtype, w.new_shape)}"
    if w.changes == ["removed"]:
        return f"- {w.name} {tensor(w.old_dtype, w.old_shape)}"
    parts: list[str] = []
    for change in w.changes:
        if change == "renamed":
            parts.append(f"renamed from {w.renamed_from}")
        elif change == "kind":
            parts.append(f"{w.old_kind} -> {w.new_kind}")
        elif change == "persistent":
            parts.append("persistence changed")
        elif change in ("dtype", "shape"):
            parts.append(
                f"{change} {tensor(w.old_dtype, w.old_shape)} -> {tensor(w.new_dtype, w.new_shape)}"
            )
        elif change == "layout":
            parts.append("stored layout changed, values equal")
        elif change == "value":
            parts.append(_values_text(w.stats))
    if w.note:
        parts.append(w.note)
    return f"~ {w.name}: {'; '.join(dict.fromkeys(parts))}"


def _values_text(stats: ValueStats | None) -> str:
    if stats is None:
        return "values changed"
    rel = "n/a" if stats.rel_norm is None else f"{stats.rel_norm:.3g}"
    return (
        f"values changed ({stats.differing} of {stats.numel} differ, "
        f"max |diff| {stats.max_abs_diff:.6g}, relative norm {rel})"
    )
