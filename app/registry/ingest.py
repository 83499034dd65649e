"""What the registry learns from an uploaded .pt2 before storing it: validity, digests, summary,
and the archive it will serve, which our writer makes from what was checked (the recipe that
runs these, in a document worker and a torch worker, is app.jobs.push).

The upload itself is never stored. The served archive holds the pushed model's screened
document (its bytes as uploaded), its weights and constants streamed from the upload with
configs we write, the markers, and its sample inputs only when they are proven loadable by
torch's weights_only loader; otherwise they are left out with a warning. So the archive digest
covers every byte served, and a consumer's `torch.export.load` of it unpickles nothing it could
not have unpickled with weights_only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

import schema
from app import operations as ops
from app.archive import Archive
from app.archive.pt2 import SAMPLE_INPUTS
from app.archive.raw import Streamed
from app.archive.writer import write_archive
from app.programs.digest import Digests
from app.programs.findings import Finding, Report
from app.registry.blobs import Staged
from app.registry.errors import RegistryFailure
from app.registry.records import Verification
from app.registry.summary import Summary, summarize
from app.registry.verification import invalid_program
from app.releases import compat as release_compat
from app.settings import Settings


@dataclass(frozen=True)
class Vetted:
    """What vetting a checked model finds, short of its bytes: what a document worker hands back
    to the API process, which holds neither the program nor its canonical bytes until it stores
    them."""

    archive_model: str
    digests: Digests
    schema_version: str
    min_schema_version: str
    readable_by: list[str]
    summary: Summary
    #: what was left out of the upload, and why
    warnings: list[Finding]


@dataclass(frozen=True)
class Candidate:
    """A program that passed validation at level torch (or short of torch's check where
    unverified pushes are allowed), ready to be stored: what vetting found, its canonical bytes,
    the archive to serve and how far it was checked."""

    vetted: Vetted
    canonical: bytes
    #: the archive to store and serve (finished), written by us from what was checked
    archive: Staged
    #: checked by torch, or short of it for lack of namespaces the workers import
    verification: Verification


def refuse_invalid(report: Report) -> None:
    """Refuse a program not valid at level torch, with its report's errors."""
    if not report.valid:
        raise invalid_program(report)


def vet(
    source: ops.Source, settings: Settings, model: str | None, served: BinaryIO | Staged
) -> tuple[Vetted, bytes]:
    """Canonicalize and summarize a checked model, and write the archive to serve to `served`
    (left open); its facts and canonical bytes."""
    assert source.archive is not None
    document = ops.read_document(source, model, settings)
    canonical = ops.canonical(source, settings, document.name)
    samples = ops.sample_inputs(source, settings)
    _write_served(source.archive, document.name, samples, served)
    compat = release_compat(document.doc)
    dropped = samples.dropped.get(document.name)
    vetted = Vetted(
        archive_model=document.name,
        digests=canonical.digests,
        schema_version=document.from_version,
        min_schema_version=compat.min_version,
        readable_by=list(compat.readable_by),
        summary=summarize(document.doc, ops.tied_weights(source, document.name)),
        warnings=[dropped] if dropped is not None else [],
    )
    return vetted, canonical.data


def refuse_unproven_pickles(source: ops.Source) -> None:
    """Pickled payloads and objects pass the checks only where a deployment allows them as
    opaque bytes; the registry serves nothing it cannot prove, so it refuses them always."""
    archive = source.archive
    assert archive is not None
    pickled = [m for m in archive.pickled if m not in archive.sample_inputs.values()]
    if pickled:
        raise RegistryFailure(
            "unsafe-pickle",
            f"the registry stores no pickled members but proven sample inputs: {pickled}",
            [schema.Issue("unsafe-pickle", "", m) for m in pickled],
        )


def _write_served(
    archive: Archive, model: str, samples: ops.SampleInputs, into: BinaryIO | Staged
) -> None:
    """The served archive of `model`, streamed into `into`."""
    opaque: dict[str, bytes | Streamed] = {
        archive.relative(member): archive.streamed(member) for member in archive.extra
    }
    if model in samples.proven:
        opaque[SAMPLE_INPUTS.format(model)] = archive.streamed(samples.proven[model])
    write_archive(
        into,
        {model: archive.documents[model]},
        archive.streamed_tensors(model),
        opaque_members=opaque,
    )
