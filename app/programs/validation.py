"""Validation of documents without torch: bounds, schema, semantics and the safety screen.

Levels: `schema` (bounds, then the document against the wire models), `semantic` (names,
metadata, signature, weights, ranges, module call graph, opset: `app.programs.semantics`, and
the safety screen of `app.programs.screen`), `torch` (the same here; the bridge adds torch's own
checks and removes "torch" from `unchecked`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import schema
from app.programs.bounds import check_bounds
from app.programs.findings import Finding, FindingList, Level, Report
from app.programs.graph import GraphSite, walk_graphs
from app.programs.screen import custom_namespaces, screen
from app.programs.semantics import check_semantics
from app.releases import judging, verdicts
from app.settings import Limits
from schema.compat import newest_used

#: The oldest schema version a document can be said to need: the first 8.x torch shipped.
FLOOR: schema.Version = (8, 2)

_CURRENT = schema.format_version(schema.CURRENT)


# ---------------------------------------------------------------- entry points


def validate_bytes(
    data: bytes,
    level: Level,
    limits: Limits,
    tensors: Mapping[str, schema.TensorMeta] | None = None,
    pickled: Sequence[str] = (),
) -> tuple[Report, schema.ExportedProgram | None]:
    """Check bounds, parse and validate a document; the parsed document unless unreadable."""
    bounds = check_bounds(data, limits)
    if bounds:
        return _unread(level, bounds), None
    try:
        read = schema.read(data, schema.ExportedProgram)
    except schema.DocumentInvalid as exc:
        found = FindingList()
        for issue in exc.issues:
            found.add(issue.code, "error", issue.path, issue.message)
        return _unread(level, found.result()), None
    report = validate_document(
        read.document, level, limits, tensors, pickled, unknown=read.unknown_fields
    )
    return report, read.document


def validate_document(
    doc: schema.ExportedProgram,
    level: Level,
    limits: Limits,
    tensors: Mapping[str, schema.TensorMeta] | None = None,
    pickled: Sequence[str] = (),
    *,
    unknown: list[str] | None = None,
) -> Report:
    """Validate a parsed document: unknown fields (as its read found them, or looked up), then
    semantics and safety unless the level is `schema`."""
    found = FindingList()
    if unknown is None:
        unknown = schema.unknown_fields(doc)
    for path in unknown:
        found.add("unknown-field", "warning", path, f"not declared by schema {_CURRENT}; kept")
    graphs: list[GraphSite] | None = None
    if level == "schema":
        unchecked = ["semantic", "safety", "weights", "torch"]
    else:
        graphs = list(walk_graphs(doc.graph_module.graph))
        _, note = judging(doc.torch_version)
        if note is not None:
            found.add("torch-release-unknown", "warning", "/torch_version", note)
        check_semantics(doc, graphs, tensors, found)
        found.extend(screen(doc, limits, pickled, graphs=graphs))
        unchecked = [*(["weights"] if tensors is None else []), "torch"]
    version = schema_floor(doc)
    readable = [v.release for v in verdicts(doc, unknown) if v.readable and not v.ignoring]
    findings = found.result()
    return Report(
        valid=not any(f.severity == "error" for f in findings),
        level=level,
        findings=findings,
        unknown_fields=unknown,
        min_schema_version=schema.format_version(version),
        oldest_torch_release=readable[0] if readable else "",
        readable_by=readable,
        namespaces_to_register=custom_namespaces(doc, graphs=graphs),
        unchecked=unchecked,
    )


def _unread(level: Level, findings: list[Finding]) -> Report:
    return Report(
        valid=False,
        level=level,
        findings=findings,
        unknown_fields=[],
        min_schema_version="",
        oldest_torch_release="",
        readable_by=[],
        namespaces_to_register=[],
        unchecked=["semantic", "safety", "weights", "torch"],
    )


# ---------------------------------------------------------------- bounds


def schema_floor(doc: schema.ExportedProgram) -> schema.Version:
    """The oldest 8.x schema version that has every feature the document uses."""
    return max(FLOOR, newest_used(doc))
