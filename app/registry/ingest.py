"""What the registry learns from an uploaded .pt2 before storing it: validity, digests, summary."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import schema
from app import operations as ops
from app.programs.digest import Digests
from app.registry.errors import RegistryFailure
from app.registry.summary import Summary, summarize
from app.settings import Settings


@dataclass(frozen=True)
class Candidate:
    """A program that passed validation at level torch, ready to be stored."""

    archive_model: str
    digests: Digests
    canonical: bytes
    schema_version: str
    min_schema_version: str
    readable_by: list[str]
    summary: Summary


def prepare(
    path: Path, settings: Settings, runner: ops.TorchRunner, model: str | None = None
) -> Candidate:
    """Validate one model of a .pt2 at level torch (refused with the report's errors if invalid),
    then canonicalize and summarize it."""
    with ops.open_source(path, "zip", settings) as source:
        report = ops.validate(source, "torch", settings, runner, model)
        if not report.valid:
            errors = [f for f in report.findings if f.severity == "error"]
            raise RegistryFailure(
                "invalid-program",
                f"the program is not valid at level torch ({len(errors)} errors)",
                [schema.Issue(f.code, f.path, f.message) for f in errors],
            )
        document = ops.read_document(source, model, settings)
        canonical = ops.canonical(source, settings, document.name)
    compat = schema.compat(document.doc)
    return Candidate(
        archive_model=document.name,
        digests=canonical.digests,
        canonical=canonical.data,
        schema_version=document.from_version,
        min_schema_version=compat.min_version,
        readable_by=list(compat.readable_by),
        summary=summarize(document.doc),
    )
