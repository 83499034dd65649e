"""The comparison of two programs: each part compared, then counted and given a verdict."""

from __future__ import annotations

from app.programs.canonical import canonical_bytes, stable_form
from app.programs.diff.interface import compare_interface, compare_ranges, match_inputs
from app.programs.diff.models import (
    Counts,
    FieldChange,
    ModuleChange,
    OpsetChange,
    ProgramDiff,
    Summary,
    Verdict,
    WeightChange,
)
from app.programs.diff.nodes import Sides, diff_graphs
from app.programs.diff.prepared import Ref, build_graph, canonical_graph
from app.programs.diff.symbols import Symbols
from app.programs.diff.text import plural
from app.programs.diff.weights import compare_weights
from app.programs.digest import graph_digest_of
from app.programs.graph import values as value_names
from app.programs.inspect import InspectFailure, module_tree
from app.programs.values import WeightSource
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
    modules, notes = _modules(old, new, weights.renamed)
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
    if diff.summary.verdict == "identical":
        # "identical" is the registry's "same program digest": what the parts above do not
        # look at (a stride, a dtype of an intermediate value) still keeps it from being said
        old_digest, new_digest = (
            graph_digest_of(canonical_bytes(stable_form(d))) for d in (old, new)
        )
        if old_digest != new_digest:
            diff.fields.append(FieldChange(field="graph_digest", old=old_digest, new=new_digest))
            diff.summary = _summary(diff, compared)
    return diff


def _input_refs(
    doc: ExportedProgram, users: dict[str, str] | None, renamed: dict[str, str]
) -> dict[str, Ref]:
    """Graph input value -> identity; the new side's user inputs and weights in old names. A
    new weight under a name whose old tensor moved to another name is another weight: the
    nodes reading it are new, not the old ones that read that name."""
    moved = set(renamed.values())

    def weight(fqn: str) -> Ref:
        if fqn in renamed:
            return ("in", "weight", renamed[fqn])
        return ("in", "new weight" if fqn in moved else "weight", fqn)

    refs: dict[str, Ref] = {}
    for k, spec in enumerate(doc.graph_module.signature.input_specs):
        if isinstance(spec, InputSpecUserInput):
            for name in value_names(spec.user_input.arg):
                if users is None:
                    refs[name] = ("in", "user", name)
                elif name in users:
                    refs[name] = ("in", "user", users[name])
                else:
                    refs[name] = ("in", "new user", name)
        elif isinstance(spec, InputSpecParameter):
            fqn = spec.parameter.parameter_name
            refs[spec.parameter.arg.name] = weight(fqn)
        elif isinstance(spec, InputSpecBuffer):
            fqn = spec.buffer.buffer_name
            refs[spec.buffer.arg.name] = weight(fqn)
        elif isinstance(spec, InputSpecTensorConstant):
            fqn = spec.tensor_constant.tensor_constant_name
            refs[spec.tensor_constant.arg.name] = weight(fqn)
        elif isinstance(spec, InputSpecCustomObj):
            refs[spec.custom_obj.arg.name] = ("in", "object", spec.custom_obj.custom_obj_name)
        elif isinstance(spec, InputSpecToken):
            refs[spec.token.arg.name] = ("in", "token", k)
    return refs


def _class_name(type_name: str | None) -> str | None:
    return None if type_name is None else type_name.rsplit(".", 1)[-1]


def _module_moves(renamed: dict[str, str]) -> dict[str, str]:
    """Old module path -> new path, from the weights that moved: the module where an old and
    a new name first differ (``layers.3`` -> ``layers.4`` for ``layers.3.0.weight`` ->
    ``layers.4.0.weight``), kept when every moved weight under it agrees and no two old
    modules move to one path."""
    seen: dict[str, str | None] = {}
    for new_name, old_name in renamed.items():
        a, b = old_name.split("."), new_name.split(".")
        if len(a) != len(b) or len(a) < 2:
            continue
        differ = [k for k in range(len(a) - 1) if a[k] != b[k]]
        if not differ or a[differ[-1] + 1 :] != b[differ[-1] + 1 :]:
            continue
        src, dst = ".".join(a[: differ[-1] + 1]), ".".join(b[: differ[-1] + 1])
        seen[src] = dst if seen.get(src, dst) == dst else None
    moves = {src: dst for src, dst in seen.items() if dst is not None}
    targets = list(moves.values())
    return {src: dst for src, dst in moves.items() if targets.count(dst) == 1}


def _moved_path(path: str, moves: dict[str, str]) -> str:
    """`path` in the new tree's names when it, or a module above it, moved."""
    parts = path.split(".")
    for k in range(len(parts), 0, -1):
        head = ".".join(parts[:k])
        if head in moves:
            return ".".join([moves[head], *parts[k:]])
    return path


def _modules(
    old: ExportedProgram, new: ExportedProgram, renamed: dict[str, str]
) -> tuple[list[ModuleChange], list[str]]:
    """Modules added, removed, of another class, or moved (an inserted layer moves the later
    ones: they are matched through the weights that moved with them, not by path)."""
    try:
        old_tree = module_tree(old).modules
        after = {m.path: m for m in module_tree(new).modules}
    except InspectFailure as exc:
        return [], [f"module trees were not compared: {exc}"]
    moves = _module_moves(renamed)
    before = {_moved_path(m.path, moves): m for m in old_tree}
    found: list[ModuleChange] = []
    for path, module in before.items():
        if path not in after:
            found.append(ModuleChange(path=module.path, change="removed", old_type=module.type))
    for path, module in after.items():
        previous = before.get(path)
        if previous is None:
            found.append(ModuleChange(path=path, change="added", new_type=module.type))
            continue
        if path in moves.values():
            found.append(
                ModuleChange(
                    path=path,
                    change="moved",
                    old_path=previous.path,
                    old_type=previous.type,
                    new_type=module.type,
                )
            )
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


def _line(verdict: Verdict, c: Counts, compared: bool, diff: ProgramDiff) -> str:
    parts: list[str] = []
    if c.breaking_changes:
        parts.append(f"{plural(c.breaking_changes, 'breaking interface change')}")
    if c.interface_changes - c.breaking_changes:
        parts.append(
            plural(c.interface_changes - c.breaking_changes, "compatible interface change")
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
        parts.append(f"{plural(c.weights_new_values, 'tensor')} with new values ({shown})")
    if c.range_constraints_changed:
        parts.append(plural(c.range_constraints_changed, "range constraint change"))
    if c.opsets_changed:
        parts.append(plural(c.opsets_changed, "opset change"))
    if c.modules_changed:
        parts.append(plural(c.modules_changed, "module change"))
    parts.extend(
        f"{f.field} {f.old} -> {f.new}" for f in diff.fields if f.field == "schema_version"
    )
    if any(f.field == "graph_digest" for f in diff.fields):
        parts.append("the canonical forms differ where no part above looks")
    body = "; ".join(parts) if parts else "no differences"
    tail = "" if compared else " (stored tensor values not compared)"
    return f"{verdict}: {body}{tail}"
