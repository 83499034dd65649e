"""The operations (serialize, canonicalize, check, inspect, diff, and what deserialize needs
before torch) over archives and documents, in the process that calls them.

The one place where the layers below are composed: the jobs (app.jobs) call these, in this
process or in a worker, and so do the CLI and the routes through them. Every document is
bounded, parsed, upgraded to the current schema and screened before anything else looks at it;
torch's part is a job of app.jobs.torch.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import IO

import orjson
from pydantic import BaseModel

import schema
from app.archive import Archive, ManifestEntry, manifest, open_archive
from app.archive.pickles import check_torch_save
from app.archive.tensors import dtype_name
from app.archive.zipread import Media as Media
from app.archive.zipread import media_of as media_of
from app.failure import Failure, problem_code
from app.programs import diff as program_diffs
from app.programs import inspect as inspection
from app.programs.bounds import check_bounds
from app.programs.canonical import canonical_bytes, stable_form
from app.programs.digest import Digests, graph_digest_of, tensor_digest, weights_digest
from app.programs.findings import Finding, Level, Report
from app.programs.for_release import for_release
from app.programs.inspect import registry as inspect_views
from app.programs.inspect.common import graph_weights
from app.programs.inspect.view import InspectRequest as InspectRequest
from app.programs.inspect.view import Subject
from app.programs.screen import pickle_findings, refuse_if_unsafe, screen
from app.programs.torch_check import TorchCheck
from app.programs.validation import validate_bytes, validate_document
from app.programs.values import TensorValues, tensor_values
from app.releases import compat as release_compat
from app.releases import lacking, lacking_target, releases, rules, running
from app.settings import Settings
from app.tensors.safetensors_io import StoredTensor, write_safetensors
from app.tensors.sources import TensorSource


class OperationFailure(Failure):
    """A request the operations cannot carry out (which model, which weights, ...)."""


@dataclass
class Source:
    """What a caller handed in: an opened archive, or one bare document."""

    documents: dict[str, bytes]
    archive: Archive | None = None
    #: the archive as handed in (its path, or its bytes): torch workers open it themselves.
    origin: Path | bytes | None = None
    #: model -> its document once read and checked: the next operation on the source reuses it
    checked: dict[str, Document] = field(default_factory=dict)

    def model(self, name: str | None) -> str:
        """The chosen model's name: `name`, or the only one there is."""
        if name is not None:
            if name not in self.documents:
                raise OperationFailure(
                    "unknown-model", f"no model {name!r}; the archive has {sorted(self.documents)}"
                )
            return name
        if len(self.documents) != 1:
            raise OperationFailure(
                "ambiguous-model", f"name one of the models {sorted(self.documents)}"
            )
        return next(iter(self.documents))

    def tensor_names(self, model: str) -> dict[str, str]:
        """The model's tensors: FQN as the document names it -> name in the archive."""
        if self.archive is None:
            return {}
        prefix = f"{model}/" if len(self.documents) > 1 else ""
        return {
            name.removeprefix(prefix): name
            for name, entry in self.archive.tensors.items()
            if entry.model == model
        }

    def tensor_metas(self, model: str) -> dict[str, schema.TensorMeta] | None:
        """Metas of the model's stored tensors (None for a bare document)."""
        if self.archive is None:
            return None
        entries = self.archive.tensors
        return {
            fqn: meta
            for fqn, full in self.tensor_names(model).items()
            if (meta := entries[full].meta) is not None
        }

    @property
    def pickled(self) -> list[str]:
        """Every pickled member other than sample inputs (which are carried, never loaded)."""
        if self.archive is None:
            return []
        samples = set(self.archive.sample_inputs.values())
        return [m for m in self.archive.pickled if m not in samples]


@contextmanager
def open_source(data: bytes | Path, media: Media, settings: Settings) -> Iterator[Source]:
    """Open an archive or read a document, closing the archive afterwards."""
    if media == "json":
        raw = data if isinstance(data, bytes) else data.read_bytes()
        yield Source(_json_documents(raw, settings))
        return
    with open_archive(data, settings.limits) as archive:
        yield Source(dict(archive.documents), archive, data)


#: serialize's output, `{"documents": {name: document}, "weights": [...]}`: "documents" comes
#: first as written, and also when a tool sorts the keys.
_SERIALIZED = re.compile(rb'\s*\{\s*"documents"\s*:')


def _json_documents(raw: bytes, settings: Settings) -> dict[str, bytes]:
    """The documents of a JSON body: a bare document (named `model`), or each document of what
    serialize writes, so that its output reads wherever a document does (`--model` picks one)."""
    if not _SERIALIZED.match(raw):
        return {"model": raw}
    _refuse_unreadable(raw, settings)
    try:
        documents = orjson.loads(raw)["documents"]
    except orjson.JSONDecodeError:
        return {"model": raw}  # reported as the invalid JSON it is by whatever reads it
    if (
        not isinstance(documents, dict)
        or not documents
        or not all(isinstance(d, dict) for d in documents.values())
    ):
        raise schema.DocumentInvalid(
            [schema.Issue("wrong-type", "/documents", "expected an object of documents")]
        )
    return {str(name): orjson.dumps(doc) for name, doc in documents.items()}


@dataclass
class Document:
    """A parsed, upgraded and screened document."""

    name: str
    doc: schema.ExportedProgram
    upgrade_steps: list[str] = field(default_factory=list)
    from_version: str = ""


def _refuse_unreadable(raw: bytes, settings: Settings) -> None:
    """A document over a bound cannot be read: refused, not reported."""
    bounds = [f for f in check_bounds(raw, settings.limits) if f.severity == "error"]
    if bounds:
        first = bounds[0]
        raise OperationFailure(problem_code(first.code), first.message, _issues(bounds))


def read_document(source: Source, model: str | None, settings: Settings) -> Document:
    """Bound, parse, upgrade (older or newer 8.x, 7.x) and screen one model's document, once
    per source: a document read (or validated) before is handed on as it was checked."""
    name = source.model(model)
    if name in source.checked:
        return source.checked[name]
    raw = source.documents[name]
    _refuse_unreadable(raw, settings)
    upgraded = schema.upgrade(raw)
    refuse_if_unsafe(screen(upgraded.document, settings.limits, source.pickled))
    read = Document(name, upgraded.document, upgraded.steps, upgraded.from_version)
    source.checked[name] = read
    return read


def _issues(findings: list[Finding]) -> list[schema.Issue]:
    return [schema.Issue(f.code, f.path, f.message) for f in findings]


# ---------------------------------------------------------------- serialize


@dataclass
class Serialized:
    """Every document of an archive plus its weights manifest."""

    documents: dict[str, schema.ExportedProgram]
    weights: list[ManifestEntry]

    def manifest(self) -> list[dict[str, object]]:
        """The weights manifest as JSON data."""
        return [w.model_dump(mode="json") for w in self.weights]

    def json(self) -> bytes:
        """`{"documents": {name: document}, "weights": manifest}`: what serialize writes, and
        what `open_source` reads back as JSON."""
        documents = {n: orjson.Fragment(schema.dump(d)) for n, d in self.documents.items()}
        return orjson.dumps({"documents": documents, "weights": self.manifest()})


def serialize(source: Source, settings: Settings) -> Serialized:
    """The screened documents and the weights manifest (sha256 streamed, nothing unpickled)."""
    refuse_disallowed_pickles(source, settings)
    docs = {name: read_document(source, name, settings).doc for name in source.documents}
    weights = manifest(source.archive) if source.archive is not None else []
    return Serialized(docs, weights)


def refuse_disallowed_pickles(source: Source, settings: Settings) -> None:
    """Pickled payloads are refused unless the deployment carries them as opaque bytes, by the
    rule validation reports (`pickle_findings`). Sample inputs are not refused: what we write
    never holds ones we cannot prove (`sample_inputs`)."""
    refused = [f for f in pickle_findings(source.pickled, settings.limits) if f.severity == "error"]
    if refused:
        raise OperationFailure(
            "unsafe-pickle",
            f"the archive holds pickled members, which are never loaded: {source.pickled}",
            _issues(refused),
        )


SAMPLE_INPUTS_DROPPED = "sample-inputs-dropped"


@dataclass(frozen=True)
class SampleInputs:
    """Each model's sample inputs: the members proven loadable, and a warning for the others."""

    #: model -> its non-empty sample inputs member that torch's weights_only loader reads
    proven: dict[str, str]
    #: model -> why its sample inputs are left out of every archive we write
    dropped: dict[str, Finding]


def sample_inputs(source: Source, settings: Settings) -> SampleInputs:
    """Prove each model's sample inputs `weights_only`-loadable, or drop them with a warning:
    they are never loaded here, and an unproven pickle is no reason to refuse the program."""
    proven: dict[str, str] = {}
    dropped: dict[str, Finding] = {}
    archive = source.archive
    if archive is None:
        return SampleInputs(proven, dropped)
    for model, member in archive.sample_inputs.items():
        size = archive.reader.member(member).size
        if not size:
            continue  # an empty member is how an archive says it has no sample inputs
        why = None
        if size > settings.max_json_bytes:
            why = f"it has {size} bytes, more than the {settings.max_json_bytes} checked"
        else:
            try:
                bad = check_torch_save(archive.reader.read_member(member, size), settings.limits)
            except Failure as exc:
                bad = [str(exc)]
            if bad:
                why = f"torch's weights_only loader cannot be proven to read it: {bad}"
        if why is None:
            proven[model] = member
        else:
            dropped[model] = Finding(
                code=SAMPLE_INPUTS_DROPPED,
                severity="warning",
                path="",
                message=f"sample inputs {member} left out of what is written; {why}",
            )
    return SampleInputs(proven, dropped)


def weights_safetensors(source: Source, model: str | None = None) -> bytes:
    """The model's tensors as a safetensors file (kinds kept in its metadata)."""
    out = io.BytesIO()
    write_weights_safetensors(source, out, model)
    return out.getvalue()


def write_weights_safetensors(source: Source, out: IO[bytes], model: str | None = None) -> None:
    """`weights_safetensors` written to `out`, each tensor streamed from the archive in turn
    (a view of part of a larger storage reads that storage whole); a tied tensor is stored
    once and its other names carried as aliases (`tied_weights`)."""
    tensors: list[StoredTensor] = []
    archive = source.archive
    if archive is not None:
        for fqn, stored in source.tensor_names(source.model(model)).items():
            entry = archive.tensors[stored]
            if entry.use_pickle or entry.meta is None:
                continue
            tensors.append(
                StoredTensor(
                    fqn, entry.kind, entry.meta, entry.size, partial(archive.iter_tensor, stored)
                )
            )
    write_safetensors(out, tensors, aliases=tied_weights(source, model))


def tied_weights(source: Source, model: str | None = None) -> dict[str, str]:
    """Each tensor that is another one's view of the same stored member (a tied weight, such
    as an LM head sharing the embedding: torch.export.save stores it once), mapped to the first
    of them in name order. Pickled payloads tie nothing."""
    archive = source.archive
    if archive is None:
        return {}
    first: dict[tuple[str, str], str] = {}
    tied: dict[str, str] = {}
    for fqn, stored in sorted(source.tensor_names(source.model(model)).items()):
        entry = archive.tensors[stored]
        if entry.use_pickle or entry.meta is None:
            continue
        view = entry.meta.model_copy(update={"requires_grad": False}).model_dump_json()
        kept = first.setdefault((entry.member, view), fqn)
        if kept != fqn:
            tied[fqn] = kept
    return tied


# ---------------------------------------------------------------- canonicalize


@dataclass(frozen=True)
class Vouched:
    """The digests a source vouches for: the graph's always, the weights' and the program's only
    when it held the weights (a JSON document's weights digest would be the empty set's, the
    same for every model, and its program digest would claim weights it never saw)."""

    graph: str
    weights: str | None
    program: str | None


@dataclass
class Canonical:
    """The canonical bytes of one model and its digests."""

    model: str
    data: bytes
    digests: Digests
    #: whether the source held the model's weights (a JSON document holds none)
    weights_held: bool

    def vouched(self) -> Vouched:
        """The digests the source vouches for (`Vouched`)."""
        held = self.weights_held
        digests = self.digests
        return Vouched(
            digests.graph, digests.weights if held else None, digests.program if held else None
        )


def canonical(source: Source, settings: Settings, model: str | None = None) -> Canonical:
    """Canonical document bytes, graph digest, weights digest (streamed) and program digest."""
    refuse_disallowed_pickles(source, settings)
    document = read_document(source, model, settings)
    data = canonical_bytes(stable_form(document.doc))
    return Canonical(
        document.name,
        data,
        Digests.of(graph_digest_of(data), _weights_digest(source, document.name)),
        source.archive is not None,
    )


def _weights_digest(source: Source, model: str) -> str:
    return weights_digest(tensor_digests(source, model).items())


class TensorSummary(BaseModel):
    """A tensor an archive stores: its view, the size and sha256 of its storage bytes (as
    `sha256sum` of the archive member gives), and the tagged digest of view and bytes that the
    weights digest is built from (`app.programs.digest`)."""

    name: str
    dtype: str
    shape: list[int]
    strides: list[int]
    storage_offset: int
    bytes: int
    sha256: str
    digest: str


@dataclass(frozen=True)
class _StoredView:
    """A non-pickled tensor of the model's archive, its view as ints."""

    fqn: str
    #: its name among the archive's tensors
    key: str
    dtype: schema.ScalarType
    sizes: list[int]
    strides: list[int]
    offset: int


def _stored_views(source: Source, model: str | None) -> Iterator[tuple[Archive, _StoredView]]:
    """Each tensor the model's archive stores, by FQN in name order. A bare document stores
    none; pickled tensors are left out."""
    archive = source.archive
    if archive is None:
        return
    for fqn, full in sorted(source.tensor_names(source.model(model)).items()):
        entry = archive.tensors[full]
        if entry.use_pickle or entry.meta is None:
            continue
        meta = entry.meta
        yield (
            archive,
            _StoredView(
                fqn,
                full,
                meta.dtype,
                [_concrete(s) for s in meta.sizes],
                [_concrete(s) for s in meta.strides],
                _concrete(meta.storage_offset),
            ),
        )


def _digest_of(view: _StoredView, chunks: Iterable[bytes]) -> str:
    return tensor_digest(int(view.dtype), view.sizes, view.strides, view.offset, chunks)


def tensor_digests(source: Source, model: str | None = None) -> dict[str, str]:
    """The digest of each tensor the model's archive stores, by FQN in name order: what its
    weights digest is built from."""
    return {
        view.fqn: _digest_of(view, archive.iter_tensor(view.key))
        for archive, view in _stored_views(source, model)
    }


def tensor_summaries(source: Source, model: str | None = None) -> list[TensorSummary]:
    """`tensor_digests` with each tensor's dtype, shape and bytes, and the sha256 of its bytes
    taken in the same read (not in `tensor_digests`: canonicalize and push need no raw sha256)."""
    found: list[TensorSummary] = []
    for archive, view in _stored_views(source, model):
        raw = hashlib.sha256()
        digest = _digest_of(view, _hashing(archive.iter_tensor(view.key), raw.update))
        found.append(
            TensorSummary(
                name=view.fqn,
                dtype=dtype_name(view.dtype),
                shape=view.sizes,
                strides=view.strides,
                storage_offset=view.offset,
                bytes=archive.tensors[view.key].size,
                sha256=raw.hexdigest(),
                digest=digest,
            )
        )
    return found


def tensor_value_stats(source: Source, model: str | None = None) -> list[TensorValues]:
    """The value statistics of each tensor the model's archive stores, by FQN in name order
    (pickled ones listed with a note); a bare document stores none."""
    if source.archive is None:
        return []
    return tensor_values(program_diffs.ArchiveWeights(source.archive, source.model(model)))


def _hashing(chunks: Iterator[bytes], update: Callable[[bytes], object]) -> Iterator[bytes]:
    """The chunks as they are, each fed to `update` on the way."""
    for chunk in chunks:
        update(chunk)
        yield chunk


def _concrete(value: schema.SymIntAsInt | schema.SymIntAsExpr) -> int:
    if isinstance(value, schema.SymIntAsInt):
        return value.as_int
    raise OperationFailure("tensor-symbolic", "a stored tensor has a symbolic size")


# ---------------------------------------------------------------- validate


def check(source: Source, level: Level, settings: Settings, model: str | None = None) -> Report:
    """The report of every check short of torch's (at level torch, it says torch is unchecked);
    a document found valid past the schema level is kept on the source as read."""
    name = source.model(model)
    raw = source.documents[name]
    _refuse_unreadable(raw, settings)
    try:
        upgraded = schema.upgrade(raw)
    except schema.DocumentInvalid as exc:
        if any(issue.code == "invalid-json" for issue in exc.issues):
            raise  # not JSON at all: the request cannot be read
        return validate_bytes_report(raw, level, settings)
    report = validate_document(
        upgraded.document,
        level,
        settings.limits,
        source.tensor_metas(name),
        source.pickled,
        unknown=upgraded.unknown_fields,
    )
    if report.valid and level != "schema":
        # the screen ran and refused nothing: this is what read_document would hand on
        source.checked[name] = Document(
            name, upgraded.document, upgraded.steps, upgraded.from_version
        )
    dropped = sample_inputs(source, settings).dropped.get(name)
    report.findings.extend([dropped] if dropped is not None else [])
    for step in upgraded.steps:
        report.findings.append(Finding(code="upgraded", severity="info", path="", message=step))
    return report


def validate_bytes_report(raw: bytes, level: Level, settings: Settings) -> Report:
    """The report of a document that cannot be read (bounds or schema problems)."""
    report, _ = validate_bytes(raw, level, settings.limits)
    return report


def merge_torch_check(report: Report, check: TorchCheck) -> Report:
    """The semantic report with torch's findings, namespaces and unchecked parts added."""
    findings = [
        *report.findings,
        *(
            Finding(code=i.code, severity="error", path=i.path, message=i.message)
            for i in check.issues
        ),
    ]
    unchecked = [u for u in report.unchecked if u != "torch"]
    unchecked += [f"{i.code}: {i.message}" for i in check.unchecked]
    return report.model_copy(
        update={
            "findings": findings,
            "valid": report.valid and not check.issues,
            "namespaces_to_register": sorted(
                {*report.namespaces_to_register, *check.namespaces_to_register}
            ),
            "unchecked": unchecked,
        }
    )


# ---------------------------------------------------------------- compat


def compat(source: Source, settings: Settings, model: str | None = None) -> schema.Compat:
    """Which schema versions and torch releases can read the model's document, as written."""
    raw = source.documents[source.model(model)]
    _refuse_unreadable(raw, settings)
    return release_compat(schema.load(raw))


# ---------------------------------------------------------------- diff


def program_diff(
    old: Source, new: Source, settings: Settings, model: str | None = None
) -> program_diffs.ProgramDiff:
    """What changed between one model of two sources; each archive's tensors are its weights."""
    old_doc = read_document(old, model, settings)
    new_doc = read_document(new, model, settings)
    return program_diffs.diff_programs(
        old_doc.doc,
        new_doc.doc,
        None if old.archive is None else program_diffs.ArchiveWeights(old.archive, old_doc.name),
        None if new.archive is None else program_diffs.ArchiveWeights(new.archive, new_doc.name),
        (old_doc.from_version, new_doc.from_version),
    )


# ---------------------------------------------------------------- inspect

#: The inspect views' names (from the registry of views).
View = inspect_views.ViewName


def inspect(
    source: Source, settings: Settings, request: InspectRequest, model: str | None = None
) -> BaseModel:
    """One view of what is in a program, from its document and stored tensors (no torch)."""
    document = read_document(source, model, settings)
    subject = Subject(document.doc, weight_infos(source, document.name), settings.max_nodes)
    return inspect_views.run(request, subject)


def weight_infos(source: Source, model: str) -> list[inspection.WeightInfo] | None:
    """The model's stored tensors as the inspection views count them, ties named (None for a
    bare document)."""
    if source.archive is None:
        return None
    entries = source.archive.tensors
    tied = tied_weights(source, model)
    return [
        inspection.WeightInfo.from_meta(
            fqn, entries[full].kind, meta, entries[full].size, tied.get(fqn)
        )
        for fqn, full in source.tensor_names(model).items()
        if (meta := entries[full].meta) is not None
    ]


# ---------------------------------------------------------------- deserialize


def weights_from(
    data: bytes | Path | None, source: Source | None, model: str | None
) -> TensorSource:
    """Where a torch job reads the tensors: a safetensors file (its path, or its bytes), or the
    model's own tensors in the source's archive (none for a bare document). Nothing is read."""
    if data is not None:
        return TensorSource(safetensors=data)
    if source is None or source.archive is None:
        return TensorSource()
    if source.origin is None:
        raise ValueError("a torch job opens the archive itself: open the source with open_source")
    # pickled tensors too: a program with any is refused before a job unless the deployment
    # carries opaque pickles (`refuse_disallowed_pickles`), and the worker only copies their bytes
    names = {stored: fqn for fqn, stored in source.tensor_names(source.model(model)).items()}
    return TensorSource(archive=source.origin, names=names, limits=source.archive.reader.limits)


def with_sample_inputs(
    tensors: TensorSource, source: Source, settings: Settings, model: str | None = None
) -> TensorSource:
    """`tensors` taken from the source's own archive, with the model's sample inputs to write
    beside them when the pickle machine proves them: torch.export.load's module checks the
    program's guards only when the program has example inputs."""
    if source.archive is None or tensors.archive is None or tensors.archive is not source.origin:
        return tensors
    member = sample_inputs(source, settings).proven.get(source.model(model))
    return replace(tensors, sample_inputs=member)


def older_schema(doc: schema.ExportedProgram, for_torch: str | None) -> str | None:
    """The schema version of the document written for torch release `for_torch` (None: ours,
    the document as it is); refused where that release would not read it as `doc` means it
    (`app.programs.for_release`)."""
    if for_torch is None:
        return None
    return for_release(doc, for_torch)[1].version


def buildable(
    document: Source, weights: TensorSource, settings: Settings, model: str | None = None
) -> schema.ExportedProgram:
    """The model's checked document, refused unless torch may be asked to build it: no pickles,
    semantically valid, and weights given where the program has some."""
    refuse_disallowed_pickles(document, settings)
    read = read_document(document, model, settings)
    doc = read.doc
    # validate's torch level is semantic validation, then the worker job run here: refusing what
    # semantic validation refuses keeps "validate accepts it" and "deserialize rebuilds it" equal
    report = validate_document(
        doc, "semantic", settings.limits, document.tensor_metas(read.name), document.pickled
    )
    errors = [f for f in report.findings if f.severity == "error"]
    if errors:
        raise OperationFailure(
            "invalid-program",
            f"the program is not valid ({len(errors)} errors); first at {errors[0].path or '/'}: "
            f"{errors[0].message}",
            _issues(errors),
        )
    _refuse_without_weights(doc, weights)
    refuse_operators_not_in(doc, running())
    return doc


def refuse_operators_not_in(doc: schema.ExportedProgram, torch_version: str | None) -> None:
    """Refuse, before torch is asked to build anything, a program that calls an operator (or
    higher-order operator, or Python target) the workers' torch release lacks, naming the
    releases that have it; a release we hold no rules for is left to torch."""
    release = (torch_version or "").split("+")[0]
    if release not in releases():
        return
    absent = lacking(doc, rules(release))
    if not absent:
        return
    issues = [
        schema.Issue("operator-not-in-release", "", f"{why} ({_having(target)})")
        for target, why in absent
    ]
    raise OperationFailure(
        "operator-not-in-release",
        f"the workers run torch {torch_version}, which cannot load this program: "
        f"{issues[0].message}" + (f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""),
        issues,
    )


def _having(target: str) -> str:
    having = [r for r in releases() if not lacking_target(rules(r), target)]
    return f"torch {', '.join(having)} {'has' if len(having) == 1 else 'have'} it"


def _refuse_without_weights(doc: schema.ExportedProgram, weights: TensorSource) -> None:
    """A bare document whose program has weights, and no weights to go with it: said plainly,
    rather than as torch's list of every tensor that does not match."""
    if weights.archive is not None or weights.safetensors is not None:
        return
    needed = graph_weights(doc)
    if needed:
        raise OperationFailure(
            "weights-missing",
            f"no weights given: the document needs {len(needed)} tensor(s); pass a safetensors "
            "file (--weights, or the form part `weights`), or the .pt2 archive itself",
            [schema.Issue("weight-missing", "", f"{w.kind} {w.name!r}") for w in needed],
        )
