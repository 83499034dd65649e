"""Which torch releases load a document: its schema (through each release's reader policy)
and every operator, higher-order operator and Python target it calls (through each release's
registry)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import schema
from app.releases.rules import Rules, releases, rules
from schema.compat import document_use, reading


@dataclass(frozen=True)
class ReleaseVerdict:
    """Whether one release's `torch.export.load` loads a document, and what it loses or why not."""

    release: str
    readable: bool
    #: features it reads past and loses (`Node.name`), only when readable
    ignoring: tuple[str, ...]
    #: why not, when not readable
    reasons: tuple[str, ...]


def verdicts(doc: schema.ExportedProgram) -> list[ReleaseVerdict]:
    """One verdict per release we ship rules for, oldest first."""
    use = document_use(doc)
    targets = sorted(set(_targets(doc.graph_module.graph)))
    shipped = [rules(r) for r in releases()]
    out = []
    for r in shipped:
        read = reading(use, r.schema_version, r.unknown_keys, r.release)
        reasons = list(read.reasons)
        if r.opset_known:
            reasons += [why for t in targets if (why := missing(r, t, shipped)) is not None]
        out.append(
            ReleaseVerdict(r.release, not reasons, () if reasons else read.ignoring, tuple(reasons))
        )
    return out


def missing(r: Rules, target: str, shipped: list[Rules]) -> str | None:
    """Why release `r` cannot resolve a node target that some shipped release resolves, or None
    (also for targets of namespaces no release registers by itself: custom operators)."""
    parts = target.split(".")
    if parts[:3] == ["torch", "ops", "higher_order"] and len(parts) == 4:
        if r.is_higher_order(parts[3]) or not any(s.is_higher_order(parts[3]) for s in shipped):
            return None
        return f"higher_order.{parts[3]}: torch {r.release} has no such higher-order operator"
    if parts[:2] == ["torch", "ops"] and len(parts) == 5:
        namespace, name, overload = parts[2:]
        if not any(s.is_builtin_namespace(namespace) for s in shipped):
            return None
        if r.has_overload(namespace, name, overload):
            return None
        if r.has_operator(namespace, name):
            return f"{namespace}::{name}.{overload}: torch {r.release} has no such overload"
        return f"{namespace}::{name}: torch {r.release} has no such operator"
    if target in r.python_targets() or not any(target in s.python_targets() for s in shipped):
        return None
    return f"{target}: torch {r.release} does not read this Python target"


def _targets(graph: schema.Graph) -> Iterator[str]:
    """The target of every node, in the graph and the graphs its nodes carry (HOP bodies)."""
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.nodes:
            yield node.target
            for named in node.inputs:
                stack.extend(_subgraphs(named.arg))


def _subgraphs(arg: object) -> Iterator[schema.Graph]:
    if isinstance(arg, schema.ArgumentAsGraph):
        yield arg.as_graph.graph
    elif isinstance(arg, schema.ArgumentAsStringToArgument):
        for sub in arg.as_string_to_argument.values():
            yield from _subgraphs(sub)
