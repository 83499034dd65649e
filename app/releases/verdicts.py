"""Which torch releases load a document: its schema (through each release's reader policy)
and every operator, higher-order operator and Python target it calls (through each release's
registry)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import schema
from app.releases.rules import Rules, judging, releases, rules
from schema.compat import document_use, reading


@dataclass(frozen=True)
class ReleaseVerdict:
    """Whether one release's `torch.export.load` loads a document, saved in the archive layout of
    the release that wrote it, and what it loses or why not."""

    release: str
    readable: bool
    #: features it reads past and loses (`Node.name`), only when readable
    ignoring: tuple[str, ...]
    #: why not, when not readable
    reasons: tuple[str, ...]


def verdicts(
    doc: schema.ExportedProgram, unknown: Sequence[str] | None = None
) -> list[ReleaseVerdict]:
    """One verdict per release we ship rules for, oldest first (`unknown`: the JSON pointers of
    the keys the schema does not declare, when the caller's read found them)."""
    use = document_use(doc, unknown)
    calls = _Calls.of(doc)
    shipped = [rules(r) for r in releases()]
    writer = judging(doc.torch_version)[0]
    out = []
    for r in shipped:
        read = reading(use, r.schema_version, r.unknown_keys, r.release)
        reasons = [*_archive(writer, r), *read.reasons, *calls.reasons(r, shipped)]
        out.append(
            ReleaseVerdict(r.release, not reasons, () if reasons else read.ignoring, tuple(reasons))
        )
    return out


def _archive(writer: Rules, r: Rules) -> list[str]:
    """Why release `r` cannot open the archive the document's writer saves it in, if it cannot."""
    if writer.archive_layout == "pt2" and r.archive_layout == "legacy":
        return [
            f"its archive: torch {writer.release} saves the models/ layout, torch {r.release} "
            "reads only serialized_exported_program.json archives"
        ]
    if writer.archive_layout == "legacy" and not r.reads_legacy_archive:
        return [
            f"its archive: torch {writer.release} saves a serialized_exported_program.json "
            f"archive, which torch {r.release} does not read"
        ]
    return []


@dataclass(frozen=True)
class _Calls:
    """What a program asks of a release's registries and reader beyond its schema."""

    #: node targets (operators, higher-order operators, Python callables)
    targets: list[str]
    #: pytree type names its treespecs name
    types: list[str]
    #: higher-order op nodes whose one result is an untagged list
    hop_lists: list[str]

    @classmethod
    def of(cls, doc: schema.ExportedProgram) -> _Calls:
        graph = doc.graph_module.graph
        return cls(
            sorted(set(_targets(graph))),
            pytree_types(doc),
            sorted(set(_hop_list_outputs(graph))),
        )

    def reasons(self, r: Rules, shipped: list[Rules]) -> list[str]:
        """Why release `r` fails on the program for something other than its schema."""
        reasons = []
        if r.opset_known:
            reasons += [why for t in self.targets if (why := missing(r, t, shipped)) is not None]
            reasons += _unknown_types(r, self.types, shipped)
        if r.hop_list_output == "fatal":
            reasons += [
                f"{target}: its one result is a list with no is_hop_single_tensor_return (as torch "
                f"2.6 writes it); torch {r.release} reads that as one tensor and fails"
                for target in self.hop_lists
            ]
        return reasons


def compat(doc: schema.ExportedProgram | bytes | str) -> schema.Compat:
    """`schema.compat` (schema versions, reader policies) with what every release registers and
    reads beyond the schema: a release that lacks an operator, higher-order operator, Python
    target or pytree type the program needs does not read it. A release we hold no rules for is
    judged by those of its minor release."""
    model = schema.load(doc) if isinstance(doc, bytes | str) else doc
    found = schema.compat(model)
    shipped = [rules(r) for r in releases()]
    calls = _Calls.of(model)
    writer = judging(model.torch_version)[0]
    absent = {r.release: [*_archive(writer, r), *calls.reasons(r, shipped)] for r in shipped}

    def lacks(release: str) -> list[str]:
        minor = release.rsplit(".", 1)[0] + "."
        same = [r for r in absent if r.startswith(minor)]
        return absent.get(release, absent[same[-1]] if same else [])

    not_readable = list(found.not_readable_by)
    readable, ignoring = [], []
    for release in found.readable_by:
        if reasons := lacks(release):
            not_readable.append((release, "; ".join(reasons)))
        else:
            readable.append(release)
    for release, text in found.read_ignoring:
        if reasons := lacks(release):
            not_readable.append((release, "; ".join(reasons)))
        else:
            ignoring.append((release, text))
    everyone = [r for _, rs in sorted(schema.RELEASES.items()) for r in rs]
    order = {r: i for i, r in enumerate(everyone)}
    return replace(
        found,
        readable_by=readable,
        not_readable_by=sorted(not_readable, key=lambda item: order[item[0]]),
        read_ignoring=ignoring,
    )


def lacking(doc: schema.ExportedProgram, r: Rules) -> list[tuple[str, str]]:
    """The targets the program calls that release `r` cannot resolve though a shipped release
    can, each with why: (target, reason), sorted."""
    shipped = [rules(s) for s in releases()]
    found = ((t, missing(r, t, shipped)) for t in sorted(set(_targets(doc.graph_module.graph))))
    return [(t, why) for t, why in found if why is not None]


def lacking_target(r: Rules, target: str) -> bool:
    """Whether release `r` cannot resolve a target some shipped release resolves."""
    return missing(r, target, [rules(s) for s in releases()]) is not None


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


def pytree_types(doc: schema.ExportedProgram) -> list[str]:
    """The pytree type names the document's treespecs name (types, and the serialized names of
    namedtuples), which its reader must have registered, sorted."""
    found: set[str] = set()
    for entry in doc.graph_module.module_call_graph:
        if entry.signature is None:
            continue
        for spec in (entry.signature.in_spec, entry.signature.out_spec):
            try:
                tree = json.loads(spec)
            except (ValueError, RecursionError):
                # the screen reports it; Python's parser recurses once per level of nesting
                continue
            stack: list[Any] = [tree]
            while stack:
                item = stack.pop()
                if isinstance(item, list):
                    stack.extend(item)
                elif isinstance(item, dict):
                    _spec_types(item, found)
                    stack.extend(item.get("children_spec") or [])
    return sorted(found)


def _spec_types(node: dict[str, Any], found: set[str]) -> None:
    kind = node.get("type")
    if isinstance(kind, str):
        found.add(kind)
    context = node.get("context")
    if kind == "collections.namedtuple" and isinstance(context, str):
        try:
            name = json.loads(context)
        except (ValueError, RecursionError):
            return
        if isinstance(name, str):
            found.add(name)


def _unknown_types(r: Rules, types: list[str], shipped: list[Rules]) -> list[str]:
    """Pytree types some shipped release registers but `r` does not (its load fails on them)."""
    return [
        f"pytree type {t}: torch {r.release} has not registered it"
        for t in types
        if t not in r.pytree_types() and any(t in s.pytree_types() for s in shipped)
    ]


def _hop_list_outputs(graph: schema.Graph) -> Iterator[str]:
    """Higher-order op nodes whose one result is a list and whose flag does not say
    `is_hop_single_tensor_return=true`: what releases that read 8.7+ misread (torch's reader
    takes the missing flag for a single tensor)."""
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.nodes:
            for named in node.inputs:
                stack.extend(_subgraphs(named.arg))
            if (
                node.target.startswith("torch.ops.higher_order.")
                and len(node.outputs) == 1
                and not node.is_hop_single_tensor_return
                and not isinstance(
                    node.outputs[0],
                    schema.ArgumentAsTensor
                    | schema.ArgumentAsNone
                    | schema.ArgumentAsSymInt
                    | schema.ArgumentAsSymFloat
                    | schema.ArgumentAsSymBool,
                )
            ):
                yield node.target


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
