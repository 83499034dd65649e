"""The document jobs: torch-free work on an uploaded program, run in the document pool.

Reading a document is where a hostile upload costs memory and time (a 46 MB archive with 100k
nodes took 1.9 GB to parse), so above `document_inline_bytes` it happens in a worker with its own
address-space limit and time limit, never in the API process. A job is given the upload's path
and writes what may be large (canonical bytes, a checked document for torch) to a path it is
given; it returns only small values. Nothing here imports torch: the workers are spawned fresh
interpreters (the forkserver belongs to the torch pool and preloads torch). A spawned worker
imports the parent's main module again, as multiprocessing does (`pt2serde serve`, uvicorn and
`python -m app.cli` import no torch; tests/workers checks a worker's modules).
"""

from __future__ import annotations

import threading
import zipfile
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

import schema
from app import operations as ops
from app.failure import Failure
from app.programs.diff import ProgramDiff
from app.programs.digest import Digests
from app.programs.findings import Level, Report
from app.programs.inspect.graph_view import SymbolRange, symbol_ranges
from app.registry.stored import StoredArchive, stored_source
from app.settings import Settings
from app.tensors.sources import TensorSource
from app.workers.pool import LazyPool, PoolSpec

T = TypeVar("T")

#: Imported by each document worker as it starts, so that its first job starts warm.
IMPORTS: tuple[str, ...] = ("app.workers.documents",)


def document_spec(settings: Settings) -> PoolSpec:
    """The document pool's shape, from the settings (document_*)."""
    return PoolSpec(
        kind="document",
        workers=settings.document_workers,
        preload=IMPORTS,
        imports=(),
        jobs_module=__name__,
        start_method="spawn",
        memory_mb=settings.document_worker_memory_mb,
        job_timeout_s=settings.document_job_timeout_s,
        job_timeout_base_s=settings.document_job_timeout_base_s,
        job_timeout_per_mb_s=settings.document_job_timeout_per_mb_s,
        max_jobs=settings.document_worker_max_jobs,
        idle_s=settings.document_worker_idle_s,
        recycle_rss_mb=settings.document_worker_recycle_rss_mb,
        # a spawned worker imports for a second or more: not while a request waits
        refill_at_once=True,
        setting_prefix="document_",
    )


class DocumentRunner(LazyPool):
    """Runs document jobs: in this process for an input of at most `document_inline_bytes`, in
    the document pool (started by its first job) otherwise.

    A round trip to a warm worker costs 0.3-0.6 ms of CPU beyond the job (a 107-node document's
    semantic validation takes 6-7 ms either way), and more in wake-ups on a busy machine: so
    small documents stay here, where the 256 KiB default costs at most 24 MiB by the admission
    estimate, well inside the API process's 64 MiB budget. But one process runs one thread of
    Python at a time: a second small job while one runs here goes to a worker that is idle at
    that moment, if any (an HTTP process that got most of the connections then uses the other
    cores too), and otherwise runs here as well, never waiting behind a large job.
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__(document_spec(settings))
        self.inline_bytes = settings.document_inline_bytes
        self.at_start = settings.document_workers_at_start
        #: held by the small job running in this process, if any
        self._here = threading.Lock()

    def start(self) -> None:
        """Start the workers now if the settings say so (document_workers_at_start): they import
        while the process waits for work, not while its first large upload waits for them."""
        if self.at_start:
            with suppress(Failure):  # the first job that needs a worker tries again, and says why
                self.get()

    def run(self, size: int, job: Any, *args: Any) -> Any:
        """`job(*args)` for documents of `size` bytes in all, here or in a worker (whose time
        limit grows with `size`: an archive's file size says little about its documents')."""
        timeout = self.spec.time_limit(size)
        if size > self.inline_bytes:
            return self.submit(job, *args, timeout_s=timeout)
        if self._here.acquire(blocking=False):
            try:
                return job(*args)
            finally:
                self._here.release()
        sent, result = self.submit_if_idle(job, *args, timeout_s=timeout)
        return result if sent else job(*args)


@dataclass(frozen=True)
class UploadedProgram:
    """An uploaded program as a job finds it: its file (or a small JSON body's bytes, which
    never leave the API process) and what it holds."""

    source: Path | bytes
    media: ops.Media


def job_canonical(
    upload: UploadedProgram, settings: Settings, model: str | None, target: Path
) -> tuple[str, Digests]:
    """Write the canonical bytes of one model to `target`; its name and digests."""
    with ops.open_source(upload.source, upload.media, settings) as source:
        result = ops.canonical(source, settings, model)
    target.write_bytes(result.data)
    return result.model, result.digests


@dataclass(frozen=True)
class Checked:
    """A validation report short of torch's check, and what that check needs when it is due."""

    report: Report
    #: at level torch, for a valid program: the tensors torch checks (None: nothing to check)
    tensors: TensorSource | None = None


def job_check(
    upload: UploadedProgram,
    settings: Settings,
    level: Level,
    model: str | None,
    weights: Path | None,
    document: Path | None,
) -> Checked:
    """Every check of one model short of torch's; at level torch (which needs `document`), for
    a valid program, the checked document is written to `document` for the torch job to read."""
    with ops.open_source(upload.source, upload.media, settings) as source:
        report = ops.check(source, level, settings, model)
        if level != "torch" or not report.valid:
            return Checked(report)
        assert document is not None, "level torch hands the checked document on in a file"
        name = source.model(model)
        document.write_bytes(schema.dump(source.checked[name].doc))
        return Checked(report, ops.weights_from(weights, source, name))


def job_buildable(
    upload: UploadedProgram,
    settings: Settings,
    model: str | None,
    weights: Path | None,
    document: Path,
    for_torch: str | None = None,
) -> TensorSource:
    """Refuse what torch may not be asked to build (`operations.buildable`), and with
    `for_torch`, what that release would not read as it is (`operations.older_schema`); write
    the checked document to `document` for the torch job, and say where that job reads the
    tensors."""
    with ops.open_source(upload.source, upload.media, settings) as source:
        tensors = ops.weights_from(weights, source, model)
        doc = ops.buildable(source, tensors, settings, model)
        ops.older_schema(doc, for_torch)
        document.write_bytes(schema.dump(doc))
        return ops.with_sample_inputs(tensors, source, settings, model)


def job_serialize(upload: UploadedProgram, settings: Settings, bundle: bool, target: Path) -> None:
    """Write to `target` an archive's documents and weights manifest as JSON, or with `bundle`,
    a zip of them and the weights as safetensors (streamed: the weights never sit in memory)."""
    with ops.open_source(upload.source, upload.media, settings) as source:
        result = ops.serialize(source, settings)
        manifest = [w.model_dump(mode="json") for w in result.weights]
        if not bundle:
            documents = {n: orjson.Fragment(schema.dump(d)) for n, d in result.documents.items()}
            target.write_bytes(orjson.dumps({"documents": documents, "weights": manifest}))
            return
        with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as zf:
            for name, doc in result.documents.items():
                zf.writestr(f"documents/{name}.json", schema.dump(doc))
            zf.writestr("manifest.json", orjson.dumps(manifest))
            with zf.open("weights.safetensors", "w", force_zip64=True) as member:
                ops.write_weights_safetensors(source, member)


def job_inspect(
    upload: UploadedProgram, settings: Settings, request: ops.InspectRequest, model: str | None
) -> BaseModel:
    """One view of what is in a program."""
    with ops.open_source(upload.source, upload.media, settings) as source:
        return ops.inspect(source, settings, request, model)


def job_diff(
    old: UploadedProgram, new: UploadedProgram, settings: Settings, model: str | None
) -> ProgramDiff:
    """What changed between one model of two programs."""
    with (
        ops.open_source(old.source, old.media, settings) as was,
        ops.open_source(new.source, new.media, settings) as now,
    ):
        return ops.program_diff(was, now, settings, model)


def job_compat(upload: UploadedProgram, settings: Settings, model: str | None) -> schema.Compat:
    """Which schema versions and torch releases can read one model's document."""
    with ops.open_source(upload.source, upload.media, settings) as source:
        return ops.compat(source, settings, model)


def job_stored_validate(
    stored: StoredArchive, settings: Settings, level: Level, model: str
) -> Report:
    """A stored version's validation report at level schema or semantic."""
    with stored_source(stored, settings) as source:
        return ops.validate(source, level, settings, None, model)


def job_stored_inspect(
    stored: StoredArchive, settings: Settings, request: ops.InspectRequest, model: str
) -> BaseModel:
    """One view of what is in a stored version."""
    with stored_source(stored, settings) as source:
        return ops.inspect(source, settings, request, model)


def job_stored_ranges(stored: StoredArchive, settings: Settings, model: str) -> list[SymbolRange]:
    """The ranges of a stored version's shape symbols."""
    with stored_source(stored, settings) as source:
        return symbol_ranges(ops.read_document(source, model, settings).doc)


def job_stored_diff(
    old: StoredArchive, new: StoredArchive, settings: Settings, model: str | None
) -> ProgramDiff:
    """What changed between one model of two stored versions."""
    with stored_source(old, settings) as was, stored_source(new, settings) as now:
        return ops.program_diff(was, now, settings, model)
