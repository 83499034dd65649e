"""Program endpoints: serialize, deserialize, canonicalize, validate. Thin: parse, call, shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel

from app import operations as ops
from app.api.deps import (
    Body,
    InspectDep,
    OutputDep,
    PoolDep,
    Program,
    ProgramDep,
    Received,
    Scratch,
    SettingsDep,
    UploadDep,
    Work,
    WorkDep,
    admit,
    admitted_program,
    pool_of,
    settings_of,
)
from app.api.docs import (
    DOCUMENT_BODY,
    READ_PROBLEMS,
    TORCH_PROBLEMS,
    UPLOAD_PROBLEMS,
    ZIP,
    request_body,
)
from app.archive import ManifestEntry
from app.failure import ProblemCode
from app.http.problems import ServiceError, problem_responses
from app.http.spliced import SplicedResponse
from app.http.uploads import Part, Upload, hold, receive
from app.jobs import documents as jobs
from app.jobs.torch import job_splice_pt2
from app.programs.diff import ProgramDiff, render_text
from app.programs.findings import Level, Report
from app.programs.inspect.registry import InspectAnswer, answer

router = APIRouter(prefix="/v1", tags=["programs"])
#: What a route that works on a document in a worker can also answer (app.workers, app.jobs).
WORK_PROBLEMS: tuple[ProblemCode, ...] = ("service-busy", *TORCH_PROBLEMS)


class SerializeResponse(BaseModel):
    """Every document of the archive (torch's wire JSON) and the weights manifest."""

    documents: dict[str, Any]
    weights: list[ManifestEntry]


class LargeFileResponse(FileResponse):
    """A file answer sent in 4 MiB chunks, not Starlette's 64 KiB: a 350 MB .pt2 goes out in
    under a hundred sends rather than thousands (each a thread hop and an event-loop turn)."""

    chunk_size = 4 * 1024 * 1024


def _source_media(part: Part) -> ops.Media:
    if part.media not in ("zip", "json"):
        raise ServiceError("unsupported-media-type", "send a .pt2 archive or a JSON document")
    return "zip" if part.media == "zip" else "json"


def _job_upload(part: Part) -> jobs.UploadedProgram:
    return jobs.UploadedProgram(part.path, _source_media(part))


def _program(program: Program) -> jobs.UploadedProgram:
    """The program a route reads: form field `file` or `document`, or the body."""
    if isinstance(program.received, Body):
        return jobs.UploadedProgram(program.received.data, "json")
    return _job_upload(program.received.one("file", "document"))


def _json(answer: BaseModel) -> Response:
    """A model as the JSON response its route's response_model describes. A sync route that
    returns the model itself has FastAPI validate it again in another trip to the thread pool."""
    return Response(answer.model_dump_json(), media_type="application/json")


def _weights_part(upload: Received) -> Part | None:
    if isinstance(upload, Body):
        return None
    weights = upload.parts.get("weights")
    if weights is not None and weights.media != "safetensors":
        raise ServiceError("unsupported-media-type", "the weights part must be safetensors")
    return weights


def _archive_part(part: Part) -> Part:
    if part.media != "zip":
        raise ServiceError("unsupported-media-type", "this endpoint takes a .pt2 archive")
    return part


class HeldUpload(BaseModel):
    """An upload held for later requests: each names it as ``?upload=<upload>`` and sends no
    body (the web UI's "Try a file" sends a file once for its five answers)."""

    #: the sha256 of its bytes
    upload: str
    size: int
    #: it is removed this many seconds after its last use
    expires_after_s: float


def _json_object(part: Part) -> bool:
    """Whether the JSON part's first token opens an object (the rest is read by its routes)."""
    with part.path.open("rb") as file:
        head = file.read(4096).lstrip(b" \t\r\n")
    return head.startswith(b"{")


@router.post(
    "/uploads",
    status_code=201,
    response_model=HeldUpload,
    openapi_extra=request_body("file"),
    responses=problem_responses(*UPLOAD_PROBLEMS, "invalid-document"),
)
def hold_upload(upload: UploadDep, settings: SettingsDep) -> HeldUpload:
    """Hold a .pt2 or a document (or any upload a route reads as its `file`) for the requests
    that follow: each names it with ``?upload=<sha256>`` instead of sending it again. It is
    read as any upload is (same size limit, never run), and removed a while after its last use
    (`expires_after_s`) or sooner when held uploads need the room."""
    part = upload.one("file", "document")
    if part.media == "json" and not _json_object(part):
        # what is held stands for a body its routes take: a JSON one is a program document
        raise ServiceError("invalid-document", "a JSON upload is a program document: an object")
    held = hold(settings, part)
    return HeldUpload(upload=held, size=part.size, expires_after_s=settings.held_upload_s)


@router.post(
    "/serialize",
    response_class=Response,
    openapi_extra=request_body("file", json=None),
    responses={
        200: {
            "model": SerializeResponse,
            "content": {ZIP: {"schema": {"type": "string", "format": "binary"}}},
            "description": "JSON; a zip of documents, manifest and weights.safetensors "
            "with ?weights=safetensors",
        },
        **problem_responses(*READ_PROBLEMS, "service-busy"),
    },
)
def serialize(
    upload: UploadDep,
    settings: SettingsDep,
    work: WorkDep,
    output: OutputDep,
    weights: Literal["none", "safetensors"] = "none",
) -> Response:
    """A .pt2 archive -> its documents and weights manifest (optionally the weights too)."""
    part = _job_upload(_archive_part(upload.one("file", "archive")))
    bundle = weights == "safetensors"
    work.run(jobs.job_serialize, part, settings, bundle, output)
    return LargeFileResponse(output, media_type=ZIP if bundle else "application/json")


@router.post(
    "/deserialize",
    response_class=Response,
    openapi_extra=request_body("document", "weights", json=None, zip_=False),
    responses={
        200: {
            "content": {ZIP: {"schema": {"type": "string", "format": "binary"}}},
            "description": "A .pt2 archive that torch.export.load opens",
        },
        **problem_responses(
            *READ_PROBLEMS,
            "invalid-program",
            "weights-mismatch",
            "weights-missing",
            "unknown-torch-release",
            "release-archive-layout",
            "release-missing-operator",
            "downgrade-refused",
            "operator-not-in-release",
            *WORK_PROBLEMS,
        ),
    },
)
def deserialize(
    upload: UploadDep,
    settings: SettingsDep,
    pool: PoolDep,
    work: WorkDep,
    output: OutputDep,
    model: str | None = None,
    for_torch: Annotated[
        str | None,
        Query(
            description="The torch release the archive is for (e.g. 2.10): its schema version "
            "and archive layout, refused where that release would read the program differently"
        ),
    ] = None,
) -> Response:
    """A document (JSON, or an archive's) and safetensors weights -> a loadable .pt2."""
    document = _job_upload(upload.one("document", "file"))
    weights = _weights_part(upload)
    checked = output.with_name("document.json")  # in the output's folder, removed with it
    given = weights.path if weights else None
    built = work.run(jobs.job_buildable, document, settings, model, given, checked, for_torch)
    tensors = built.tensors
    # the answer is sent, then removed: its stored tensors go out from the upload itself
    segments = pool.submit(job_splice_pt2, checked, tensors, output, for_torch)
    archive = [tensors.archive] if isinstance(tensors.archive, Path) else []
    return SplicedResponse(segments, [output, *archive], ZIP, "program.pt2")


@router.post(
    "/canonicalize",
    response_class=Response,
    openapi_extra=request_body("file"),
    responses={
        200: {
            "content": {"application/json": {"schema": DOCUMENT_BODY}},
            "description": "The canonical document's bytes; digests in X-Graph-Digest, "
            "X-Weights-Digest, X-Program-Digest and the ETag (a JSON document, which holds no "
            "weights: X-Graph-Digest and the ETag only)",
        },
        **problem_responses(*READ_PROBLEMS, "graph-cycle", *WORK_PROBLEMS),
    },
)
def canonicalize(
    program: ProgramDep,
    settings: SettingsDep,
    output: OutputDep,
    model: str | None = None,
) -> Response:
    """An archive or a document -> its canonical bytes, with the digests as headers. A JSON
    document holds no weights: it gets the graph digest alone (its ETag too)."""
    _, digests = program.run(jobs.job_canonical, _program(program), settings, model, output)
    headers = {"X-Graph-Digest": digests.graph}
    if digests.weights is not None and digests.program is not None:
        headers |= {"X-Weights-Digest": digests.weights, "X-Program-Digest": digests.program}
    headers["ETag"] = f'"{digests.program or digests.graph}"'
    return FileResponse(output, media_type="application/json", headers=headers)


@router.post(
    "/validate",
    response_model=Report,
    # any JSON: reporting what is wrong with a document is this endpoint's job
    openapi_extra=request_body("file", "weights", json={}),
    responses=problem_responses(*READ_PROBLEMS, *WORK_PROBLEMS),
)
async def validate(
    request: Request,
    level: Level = "torch",
    model: str | None = None,
) -> Response:
    """An archive or a document -> the validation report (200 with valid false if invalid); at
    level torch, the tensors of the safetensors form part `weights`, or else the archive's own."""
    return await validated(request, level, model)


async def validated(request: Request, level: Level, model: str | None) -> Response:
    """The validate route's answer (also given by app.api.direct to small JSON requests)."""
    # no dependencies and one trip to a thread: the framework's share of a small request is
    # what the 0.8 of the library loop leaves room for
    async with admitted_program(request) as program:
        return await anyio.to_thread.run_sync(_validated, request, program, level, model)


def _validated(request: Request, program: Program, level: Level, model: str | None) -> Response:
    """The validate route's work, in a thread."""
    settings = settings_of(request)
    weights = _weights_part(program.received)
    path = weights.path if weights is not None else None
    with Scratch() as checked_file:
        # only torch's check reads the checked document, from a file the document job writes
        document = checked_file.path if level == "torch" else None
        checked = program.run(
            jobs.job_check, _program(program), settings, level, model, path, document
        )
        return _json(jobs.validated(checked, pool_of(request), document))


class Feature(BaseModel):
    """A field, union arm or enum value a document uses, and the version it appeared in."""

    feature: str
    since: str


class Unreadable(BaseModel):
    """A torch release that cannot read the document, and why."""

    release: str
    reason: str


class ReadIgnoring(BaseModel):
    """A torch release that reads the document but skips fields it does not know, and which."""

    release: str
    note: str


class CompatOut(BaseModel):
    """Which schema versions and torch releases can read a document, from what it uses."""

    min_version: str
    features: list[Feature]
    #: the releases that read everything the document uses
    readable_by: list[str]
    not_readable_by: list[Unreadable]
    #: the releases that read it but lose the fields newer than their schema
    read_ignoring: list[ReadIgnoring]


@router.post(
    "/compat",
    response_model=CompatOut,
    openapi_extra=request_body("file"),
    responses=problem_responses(*READ_PROBLEMS, *WORK_PROBLEMS),
)
def compat(
    program: ProgramDep,
    settings: SettingsDep,
    model: str | None = None,
) -> CompatOut:
    """An archive or a document -> the torch releases whose schema can read it, and why not."""
    result = program.run(jobs.job_compat, _program(program), settings, model)
    return CompatOut(
        min_version=result.min_version,
        features=[Feature(feature=f, since=v) for f, v in result.features],
        readable_by=result.readable_by,
        not_readable_by=[Unreadable(release=r, reason=w) for r, w in result.not_readable_by],
        read_ignoring=[ReadIgnoring(release=r, note=n) for r, n in result.read_ignoring],
    )


@router.post(
    "/inspect",
    response_model=InspectAnswer,
    openapi_extra=request_body("file"),
    responses=problem_responses(
        *READ_PROBLEMS,
        "invalid-depth",
        "invalid-stage-count",
        "supported-missing",
        *WORK_PROBLEMS,
    ),
)
def inspect(
    program: ProgramDep,
    settings: SettingsDep,
    request: InspectDep,
    model: str | None = None,
) -> BaseModel:
    """What is in a program: module tree, module graph, pipeline stages, partitions for a set of
    supported operators (targets or namespaces), operator histogram, or weights."""
    result = program.run(jobs.job_inspect, _program(program), settings, request, model)
    return answer(request.view, result)


#: Ends the payload-too-large detail of a diff: where the same diff can be had without uploads.
REGISTRY_DIFF = (
    "; versions in the registry are diffed without uploading them: "
    "GET /v1/models/{name}/versions/{ref}/diff?against={ref}"
)


async def _diff_upload(request: Request) -> AsyncIterator[Upload]:
    """The two programs on disk, each held to the upload limit on its own."""
    async with receive(request, settings_of(request), REGISTRY_DIFF) as received:
        yield received


async def _diff_admitted(
    request: Request, upload: Annotated[Upload, Depends(_diff_upload)]
) -> AsyncIterator[Work]:
    """Admission (`deps.admit`) for both programs of a diff."""
    async for granted in admit(request, upload):
        yield granted


@router.post(
    "/diff",
    response_model=ProgramDiff,
    openapi_extra=request_body("old", "new", json=None, zip_=False, required=2),
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        **problem_responses(*READ_PROBLEMS, "graph-cycle", *WORK_PROBLEMS),
    },
)
def diff(
    upload: Annotated[Upload, Depends(_diff_upload)],
    settings: SettingsDep,
    work: Annotated[Work, Depends(_diff_admitted, scope="function")],
    model: str | None = None,
    format: Literal["json", "text"] = "json",
) -> Response:
    """What changed between two programs (archives or documents, form fields `old`, `new`, each
    up to the upload limit): interface, nodes, weights (values too when both are archives),
    ranges, modules. Versions in the registry are diffed without uploading them:
    `GET /v1/models/{name}/versions/{ref}/diff?against={ref}`."""
    old, new = _job_upload(upload.need("old")), _job_upload(upload.need("new"))
    result = work.run(jobs.job_diff, old, new, settings, model)
    if format == "text":
        return Response(render_text(result), media_type="text/plain")
    return _json(result)
