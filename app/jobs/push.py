"""A registry push's vetting, the one recipe the service, the tests and the bench call (`prepare`):
a document job reads the uploaded archive (every check short of torch's, the canonical form, the
summary, the archive to serve), a torch job checks the program, and this process copies the
served archive into the store's staging. The API process hands over paths and gets back small
values, so a big push cannot bloat it. Its graph answer is built later from the checked document
(app.jobs.graph).

A module of its own so that a document worker imports the registry's modules only when it first
vets a push, not at every start.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import schema
from app import operations as ops
from app.jobs.documents import job_stored_check, torch_check
from app.jobs.runners import DocumentWork, TorchRunner
from app.programs.findings import Report
from app.registry.ingest import Candidate, Vetted, refuse_invalid, refuse_unproven_pickles, vet
from app.registry.records import VersionInfo
from app.registry.stored import StoredArchive
from app.registry.verification import again, at_push
from app.settings import Settings
from app.tensors.sources import TensorSource

if TYPE_CHECKING:
    # the store (and the database layer under it) only in the API process, never in a worker
    from app.registry.audit import Actor
    from app.registry.store import Registry

#: the served archive is copied into the store's staging this much at a time
_COPY_CHUNK = 1 << 20


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


def prepare(
    registry: Registry,
    archive: Path,
    documents: DocumentWork,
    torch: TorchRunner,
    model: str | None = None,
    files: PushFiles | None = None,
) -> Candidate:
    """Vet an uploaded .pt2 at level torch (refused with the report's errors if invalid, stored
    unverified where `verification.at_push` allows) and stage the archive the registry would
    serve for it: `job_vet` through `documents`, torch's
    check through `torch`. The jobs write into `files` (kept for the graph answer), or into a
    temporary folder removed before this returns."""
    with _files(files) as into:
        pushing = documents.run(job_vet, archive, registry.settings, model, into)
        refuse_invalid(pushing.report)
        assert pushing.vetted is not None
        assert pushing.tensors is not None
        check = torch_check(torch, into.document, pushing.tensors)
        state = at_push(pushing.report, check, registry.settings.allow_unverified)
        served = registry.blobs.stage()
        try:
            with into.served.open("rb") as source:
                while chunk := source.read(_COPY_CHUNK):
                    served.write(chunk)
            served.finish()
            return Candidate(pushing.vetted, into.canonical.read_bytes(), served, state)
        except BaseException:
            served.discard()
            raise


def reverify(
    registry: Registry,
    info: VersionInfo,
    stored: StoredArchive,
    documents: DocumentWork,
    torch: TorchRunner,
    actor: Actor,
) -> VersionInfo:
    """torch's check of a stored version, run again as a push runs it (the reading by a
    document job, torch's check by a torch job), and its state recorded when torch built it
    (`verification.again`: refused, the state left as it was, when torch did not)."""
    with tempfile.TemporaryDirectory(prefix="pt2serde-verify-") as folder:
        into = Path(folder)
        model = info.archive_model
        checked = documents.run(job_stored_check, stored, registry.settings, model, into)
        refuse_invalid(checked.report)
        assert checked.tensors is not None
        check = torch_check(torch, into / "document.json", checked.tensors)
    verified = again(checked.report, check)
    return registry.verify(info.model, str(info.version), verified, actor)


@contextmanager
def _files(given: PushFiles | None) -> Iterator[PushFiles]:
    """`given`, or a temporary folder's files removed when the block ends."""
    if given is not None:
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="pt2serde-push-") as folder:
        yield PushFiles(Path(folder))
