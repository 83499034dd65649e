"""The document jobs of a registry push, run in the document pool like the program routes' jobs:
reading the uploaded archive, every check short of torch's, the canonical form, the summary, the
archive to serve (its graph answer is built later from the checked document: app.workers.graphs).
The API process hands over paths and gets back small values, so a big push cannot bloat it;
torch's check runs in between, in the torch pool.

A module of its own so that a document worker imports the registry's modules only when it first
vets a push, not at every start.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import schema
from app import operations as ops
from app.programs.findings import Report
from app.registry.ingest import Vetted, refuse_unproven_pickles, vet
from app.settings import Settings
from app.tensors.sources import TensorSource


@dataclass(frozen=True)
class PushFiles:
    """Where a push's jobs write what may be large, in one folder of the API process's choosing
    (removed once the push and its graph answer are done)."""

    folder: Path

    @property
    def document(self) -> Path:
        """The checked document, for torch's check and for the graph answer."""
        return self.folder / "document.json"

    @property
    def served(self) -> Path:
        """The archive the registry will serve."""
        return self.folder / "served.pt2"

    @property
    def canonical(self) -> Path:
        """The canonical bytes of the pushed model."""
        return self.folder / "canonical.json"


@dataclass(frozen=True)
class Pushing:
    """What vetting a push found short of torch's check, and what that check needs."""

    report: Report
    #: for a program valid so far: the tensors torch checks, and the candidate's facts
    tensors: TensorSource | None = None
    vetted: Vetted | None = None


def job_vet(archive: Path, settings: Settings, model: str | None, files: PushFiles) -> Pushing:
    """Vet an uploaded .pt2 for the registry short of torch's check: refuse pickled members,
    check the model; for a valid one, write its checked document, its canonical bytes and the
    archive to serve to `files`."""
    with ops.open_source(archive, "zip", settings) as source:
        refuse_unproven_pickles(source)
        report = ops.check(source, "torch", settings, model)
        if not report.valid:
            return Pushing(report)
        name = source.model(model)
        files.document.write_bytes(schema.dump(source.checked[name].doc))
        tensors = ops.weights_from(None, source, name)
        with files.served.open("wb") as served:
            vetted, canonical = vet(source, settings, name, served)
    files.canonical.write_bytes(canonical)
    return Pushing(report, tensors, vetted)
