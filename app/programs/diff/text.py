"""The diff as text for a person: what the command line prints (the JSON has everything)."""

from __future__ import annotations

from app.programs.diff.models import GraphDiff, NodeRef, ProgramDiff, ValueStats, WeightChange


def plural(n: int, word: str) -> str:
    """``1 change``, ``2 changes``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def render_text(diff: ProgramDiff) -> str:
    """The diff as a readable multi-line report, the way the command line prints it."""
    lines = [diff.summary.text]
    if diff.interface:
        breaking = sum(c.breaking for c in diff.interface)
        lines.append(f"interface ({plural(len(diff.interface), 'change')}, {breaking} breaking):")
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
            elif m.change == "moved":
                lines.append(f"  > {m.path} (was {m.old_path})")
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
