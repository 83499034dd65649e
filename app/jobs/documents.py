"""The document jobs: torch-free work on an uploaded or stored program, and the two recipes that
hand a checked program on to torch (validate at level torch, deserialize).

A job is given the upload's path (or a small JSON body's bytes, which never leave the API
process) and writes what may be large (canonical bytes, a checked document for torch) to a path
it is given; it returns only small values. It runs through a `DocumentWork` (app.jobs.runners):
in this process, or in a document worker (app.workers.runner) for a large input. The CLI calls
the same recipes on the source it opened. Nothing here imports torch: a document worker is a
spawned interpreter without it.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel
from pydantic_core import to_json

import schema
from app import operations as ops
from app.failure import Failure
from app.files import write_atomic
from app.jobs.runners import TorchRunner
from app.jobs.torch import job_deserialize_to_pt2, job_torch_check
from app.programs.diff import ProgramDiff
from app.programs.findings import Level, Report
from app.programs.inspect.graph_view import symbol_ranges
from app.programs.inspect.registry import answer
from app.programs.node_details import node_details
from app.programs.torch_check import TorchCheck
from app.registry.answers import answer_name, view_name
from app.registry.stored import StoredArchive, stored_objects, stored_source
from app.settings import Settings
from app.tensors.sources import TensorSource

#: a stored archive is copied into a file this much at a time
_COPY_CHUNK = 1 << 20


@dataclass(frozen=True)
class UploadedProgram:
    """An uploaded program as a job finds it: its file (or a small JSON body's bytes, which
    never leave the API process) and what it holds."""

    source: Path | bytes
    media: ops.Media


def job_canonical(
    upload: UploadedProgram, settings: Settings, model: str | None, target: Path
) -> tuple[str, ops.Vouched]:
    """Write the canonical bytes of one model to `target`; its name and the digests its source
    vouches for (`Canonical.vouched`)."""
    with ops.open_source(upload.source, upload.media, settings) as source:
        result = ops.canonical(source, settings, model)
    target.write_bytes(result.data)
    return result.model, result.vouched()


@dataclass(frozen=True)
class Checked:
    """A validation report short of torch's check, and what that check needs when it is due."""

    report: Report
    #: at level torch, for a valid program: the tensors torch checks (None: nothing to check)
    tensors: TensorSource | None = None


def check(
    source: ops.Source,
    settings: Settings,
    level: Level,
    model: str | None,
    weights: Path | None,
    document: Path | None,
) -> Checked:
    """Every check of one model short of torch's; at level torch (which needs `document`), for
    a valid program, the checked document is written to `document` for the torch job to read."""
    report = ops.check(source, level, settings, model)
    if level != "torch" or not report.valid:
        return Checked(report)
    assert document is not None, "level torch hands the checked document on in a file"
    name = source.model(model)
    document.write_bytes(schema.dump(source.checked[name].doc))
    return Checked(report, ops.weights_from(weights, source, name))


def job_check(
    upload: UploadedProgram,
    settings: Settings,
    level: Level,
    model: str | None,
    weights: Path | None,
    document: Path | None,
) -> Checked:
    """`check` of an upload."""
    with ops.open_source(upload.source, upload.media, settings) as source:
        return check(source, settings, level, model, weights, document)


def validated(checked: Checked, torch: TorchRunner | None, document: Path | None) -> Report:
    """The report of a `check`: with torch's check of the document `check` wrote (and its
    tensors) added when it is due; that needs a torch runner (the pool)."""
    if checked.tensors is None:
        return checked.report
    assert document is not None, "level torch hands the checked document on in a file"
    return ops.merge_torch_check(checked.report, torch_check(torch, document, checked.tensors))


def torch_check(torch: TorchRunner | None, document: Path, tensors: TensorSource) -> TorchCheck:
    """torch's check of the document `check` wrote and its tensors, in a torch worker; that
    needs a torch runner (the pool)."""
    if torch is None:
        raise ops.OperationFailure("torch-unavailable", "level torch needs the torch worker pool")
    return TorchCheck.from_dict(torch.submit(job_torch_check, document, tensors))


def validate(
    source: ops.Source,
    settings: Settings,
    level: Level,
    torch: TorchRunner | None,
    model: str | None = None,
    weights: Path | None = None,
) -> Report:
    """The validation report of one model of an opened source at a level, in this process but
    for torch's check (`check`, then `validated`); level torch checks the tensors of `weights`
    (a safetensors file) or else the archive's own."""
    if level != "torch":
        return check(source, settings, level, model, weights, None).report
    with _scratch() as document:
        return validated(check(source, settings, level, model, weights, document), torch, document)


@dataclass(frozen=True)
class Buildable:
    """A program torch may be asked to build: where its tensors are, and for an older torch
    release, the schema version its document is written in."""

    tensors: TensorSource
    schema_version: str | None = None


def buildable(
    source: ops.Source,
    settings: Settings,
    model: str | None,
    weights: Path | None,
    document: Path,
    for_torch: str | None = None,
) -> Buildable:
    """Refuse what torch may not be asked to build (`operations.buildable`), and with
    `for_torch`, what that release would not read as it is (`operations.older_schema`); write
    the checked document to `document` for the torch job, and say where that job reads the
    tensors (the model's proven sample inputs too, when they are its archive's)."""
    tensors = ops.weights_from(weights, source, model)
    doc = ops.buildable(source, tensors, settings, model)
    version = ops.older_schema(doc, for_torch)
    document.write_bytes(schema.dump(doc))
    return Buildable(ops.with_sample_inputs(tensors, source, settings, model), version)


def job_buildable(
    upload: UploadedProgram,
    settings: Settings,
    model: str | None,
    weights: Path | None,
    document: Path,
    for_torch: str | None = None,
) -> Buildable:
    """`buildable` of an upload."""
    with ops.open_source(upload.source, upload.media, settings) as source:
        return buildable(source, settings, model, weights, document, for_torch)


def deserialize_to(
    source: ops.Source,
    settings: Settings,
    torch: TorchRunner,
    target: Path,
    model: str | None = None,
    weights: Path | None = None,
    for_torch: str | None = None,
) -> str | None:
    """Write to `target` a .pt2 that torch.export.load opens, built by torch in a worker from
    one model of an opened source and its weights (`buildable`, then the torch job, which reads
    the tensors and writes the file itself). With `for_torch`, the archive is the one that torch
    release loads, whose schema version is returned; nothing is written when it is refused."""
    with _scratch() as document:
        built = buildable(source, settings, model, weights, document, for_torch)
        torch.submit(job_deserialize_to_pt2, document, built.tensors, target, for_torch)
    return built.schema_version


@contextmanager
def _scratch() -> Iterator[Path]:
    """A path for the checked document handed to a torch job, removed with its folder after."""
    with tempfile.TemporaryDirectory(prefix="pt2serde-checked-") as folder:
        yield Path(folder) / "document.json"


def job_serialize(upload: UploadedProgram, settings: Settings, bundle: bool, target: Path) -> None:
    """Write to `target` an archive's documents and weights manifest as JSON, or with `bundle`,
    a zip of them and the weights as safetensors (streamed: the weights never sit in memory)."""
    with ops.open_source(upload.source, upload.media, settings) as source:
        result = ops.serialize(source, settings)
        if not bundle:
            target.write_bytes(result.json())
            return
        with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as zf:
            for name, doc in result.documents.items():
                zf.writestr(f"documents/{name}.json", schema.dump(doc))
            zf.writestr("manifest.json", orjson.dumps(result.manifest()))
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


def job_stored_check(
    stored: StoredArchive, settings: Settings, model: str, folder: Path
) -> Checked:
    """`job_check` of a stored version at level torch, for torch's check to run again: the
    archive is copied whole into `folder` (torch's job maps its tensors from a file), and the
    checked document written beside it."""
    archive = folder / "stored.pt2"
    with stored.open(stored_objects(settings)) as handle, archive.open("wb") as out:
        shutil.copyfileobj(handle, out, _COPY_CHUNK)
    upload = UploadedProgram(archive, "zip")
    return job_check(upload, settings, "torch", model, None, folder / "document.json")


@dataclass(frozen=True)
class StoredView:
    """One view of a stored version, as the service keeps it (app/api/views.py): an inspection
    view, the validation report at level schema or semantic, its symbols' ranges, its tensors'
    summaries or value statistics, or one node's details."""

    kind: Literal["inspect", "validate", "ranges", "tensors", "tensor-stats", "node"]
    inspect: ops.InspectRequest | None = None
    level: Level = "semantic"
    #: a node's graph (its index in the graph answer) and position in it
    graph: int = 0
    position: int = 0

    def answer(self, archive: str, model: str) -> str:
        """The name the view of model `model` of the archive `archive` (its digest) is kept
        under (app/registry/answers.py)."""
        parameters = (self.inspect, self.level, self.graph, self.position, model)
        return answer_name([archive], view_name(self.kind, *parameters))


def stored_view(source: ops.Source, settings: Settings, view: StoredView, model: str) -> object:
    """The answer of one view of a source (its document read once per source: the views after
    the first reuse it)."""
    if view.kind == "inspect":
        assert view.inspect is not None
        return answer(view.inspect.view, ops.inspect(source, settings, view.inspect, model))
    if view.kind == "validate":
        return ops.check(source, view.level, settings, model)
    if view.kind == "ranges":
        return symbol_ranges(ops.read_document(source, model, settings).doc)
    if view.kind == "node":
        doc = ops.read_document(source, model, settings).doc
        return node_details(doc, view.graph, view.position)
    if view.kind == "tensor-stats":
        return ops.tensor_value_stats(source, model)
    return ops.tensor_summaries(source, model)


def job_stored_view(
    stored: StoredArchive, settings: Settings, model: str, view: StoredView, target: Path
) -> None:
    """Write one view of a stored version to `target`, atomically (its failure raised)."""
    with stored_source(stored, settings) as source:
        write_atomic(target, to_json(stored_view(source, settings, view, model)))


def job_stored_views(
    stored: StoredArchive, settings: Settings, model: str, views: list[tuple[StoredView, Path]]
) -> None:
    """Write each view of a stored version to its path, from one reading of the archive (the
    answers computed ahead of a page's first visit): a view that fails is left unwritten, and
    answers its problem when it is asked for."""
    with stored_source(stored, settings) as source:
        for view, target in views:
            try:
                body = to_json(stored_view(source, settings, view, model))
            except Failure:
                continue
            write_atomic(target, body)


def job_stored_diff(
    old: StoredArchive, new: StoredArchive, settings: Settings, model: str | None, target: Path
) -> None:
    """Write what changed between one model of two stored versions to `target`, atomically."""
    with stored_source(old, settings) as was, stored_source(new, settings) as now:
        write_atomic(target, ops.program_diff(was, now, settings, model).model_dump_json().encode())
