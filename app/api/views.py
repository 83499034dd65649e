"""Views of programs for people and the web UI: the graph grouped by module, and the inspection
and validation views of a stored version, read from the registry without uploading it."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Path, Request
from fastapi.responses import FileResponse, Response

from app import operations as ops
from app.api.deps import (
    InspectDep,
    OutputDep,
    SettingsDep,
    UploadDep,
    WorkDep,
    documents_of,
)
from app.api.docs import READ_PROBLEMS, TORCH_PROBLEMS, request_body
from app.api.graphs import graph_answer, upload_graph, version_graph_file
from app.api.registry import RegistryDep
from app.api.stored import (
    PAGE_VIEWS,
    cache_headers,
    held,
    kept_page,
    on_stored,
    run_sync,
)
from app.failure import ProblemCode
from app.http.problems import ServiceError, problem_responses
from app.jobs.documents import StoredView, job_stored_view
from app.programs.findings import Report
from app.programs.inspect.graph_view import ProgramGraph, SymbolRange
from app.programs.inspect.registry import InspectAnswer
from app.programs.node_details import NodeDetails
from app.programs.values import TensorValues
from app.registry.store import Registry
from app.registry.stored import StoredArchive
from app.settings import Settings

router = APIRouter(prefix="/v1", tags=["views"])

_JSON = "application/json"
_T = TypeVar("_T")
#: a graph answer is built in a document worker (app.api.graphs)
_GRAPH_PROBLEMS: tuple[ProblemCode, ...] = ("bad-module-stack", "module-too-deep", *TORCH_PROBLEMS)
_VERSION_PROBLEMS: tuple[ProblemCode, ...] = (
    "invalid-name",
    "model-not-found",
    "registry-unavailable",
    "request-invalid",
    "version-not-found",
    "alias-not-found",
    "version-deleted",
)
_GRAPH_DOC: dict[int | str, dict[str, Any]] = {
    200: {"model": ProgramGraph, "description": "The graph, nodes as columns"}
}


@router.get(
    "/models/{name}/versions/{ref}/graph",
    response_class=Response,
    responses={
        **_GRAPH_DOC,
        304: {"description": "If-None-Match matched the ETag (the graph of that archive)"},
        **problem_responses(*_VERSION_PROBLEMS, *_GRAPH_PROBLEMS),
    },
)
def version_graph(name: str, ref: str, request: Request, registry: RegistryDep) -> Response:
    """A stored version's graph: its module tree, every node (subgraphs' too) with operator,
    module and first output's dtype and shape, its graphs and its symbols' ranges. The ETag
    names the archive it is built from, so a client that has it revalidates for nothing."""
    info = registry.version(name, ref)
    # The archive digest covers every byte the answer is built from (and names its file, built
    # once: app.api.graphs), so an unchanged ETag means an unchanged answer.
    headers = cache_headers(graph_answer(info.digests.archive))
    if info.deleted_at is None and held(request, headers):
        return Response(status_code=304, headers=headers)
    path = version_graph_file(registry, documents_of(request), name, str(info.version))
    return FileResponse(path, media_type=_JSON, headers=headers)


@router.post(
    "/graph",
    response_class=Response,
    openapi_extra=request_body("file"),
    responses={
        **_GRAPH_DOC,
        **problem_responses(*READ_PROBLEMS, *_GRAPH_PROBLEMS, "service-busy"),
    },
)
def graph(
    upload: UploadDep,
    settings: SettingsDep,
    work: WorkDep,
    output: OutputDep,
    model: str | None = None,
) -> Response:
    """An archive's or a document's graph, as `GET /v1/models/{name}/versions/{ref}/graph`."""
    part = upload.one("file", "document")
    if part.media not in ("zip", "json"):
        raise ServiceError("unsupported-media-type", "send a .pt2 archive or a JSON document")
    media: ops.Media = "zip" if part.media == "zip" else "json"
    # written by the worker as one JSON text: response_model would validate 50,000-entry
    # columns again
    upload_graph(work, part.path, media, settings, model, output)
    return FileResponse(output, media_type=_JSON)


@router.get(
    "/models/{name}/versions/{ref}/inspect",
    response_model=InspectAnswer,
    responses=problem_responses(
        *_VERSION_PROBLEMS,
        *_GRAPH_PROBLEMS,
        "invalid-depth",
        "invalid-stage-count",
        "supported-missing",
    ),
)
async def version_inspect(
    name: str,
    ref: str,
    http: Request,
    registry: RegistryDep,
    settings: SettingsDep,
    request: InspectDep,
) -> Response:
    """A stored version through one view of `POST /v1/inspect` (same parameters)."""
    view = StoredView("inspect", inspect=request)
    return await _stored_view(http, registry, settings, name, ref, view)


@router.get(
    "/models/{name}/versions/{ref}/tensors",
    response_model=list[ops.TensorSummary],
    responses=problem_responses(*_VERSION_PROBLEMS),
)
async def version_tensors(
    name: str, ref: str, request: Request, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """Each tensor a stored version holds, by name: dtype, shape, bytes and sha256, and the
    digest its weights digest is built from."""
    view = StoredView("tensors")
    return await _stored_view(request, registry, settings, name, ref, view)


@router.get(
    "/models/{name}/versions/{ref}/tensors/stats",
    response_model=list[TensorValues],
    responses=problem_responses(*_VERSION_PROBLEMS, "service-busy"),
)
async def version_tensor_stats(
    name: str, ref: str, request: Request, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """Each tensor a stored version holds, by name, with its values at a glance: min, max,
    mean and standard deviation of its finite elements, and how many are zero, NaN or
    infinite (read by numpy from the stored archive, in a document worker when it is large)."""
    view = StoredView("tensor-stats")
    return await _stored_view(request, registry, settings, name, ref, view)


@router.get(
    "/models/{name}/versions/{ref}/nodes/{graph}/{position}",
    response_model=NodeDetails,
    responses=problem_responses(*_VERSION_PROBLEMS, *_GRAPH_PROBLEMS, "node-not-found"),
)
async def version_node(
    name: str,
    ref: str,
    graph: Annotated[int, Path(ge=0, le=2**31 - 1)],
    position: Annotated[int, Path(ge=0, le=2**31 - 1)],
    request: Request,
    registry: RegistryDep,
    settings: SettingsDep,
) -> Response:
    """One node of a stored version, numbered as its graph answer numbers them (graph index,
    position in that graph): every argument (tensors with dtype and shape, literals as
    written), every output, and where it came from (module stack, source function, the Python
    stack trace the exporter recorded)."""
    view = StoredView("node", graph=graph, position=position)
    return await _stored_view(request, registry, settings, name, ref, view)


@router.get(
    "/models/{name}/versions/{ref}/validate",
    response_model=Report,
    responses=problem_responses(*_VERSION_PROBLEMS),
)
async def version_validate(
    name: str,
    ref: str,
    request: Request,
    registry: RegistryDep,
    settings: SettingsDep,
    level: Literal["schema", "semantic"] = "semantic",
) -> Response:
    """A stored version's validation report at level schema or semantic (every version passed
    level torch when it was pushed)."""
    view = StoredView("validate", level=level)
    return await _stored_view(request, registry, settings, name, ref, view)


@router.get(
    "/models/{name}/versions/{ref}/ranges",
    response_model=list[SymbolRange],
    responses=problem_responses(*_VERSION_PROBLEMS),
)
async def version_ranges(
    name: str, ref: str, request: Request, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """The ranges of a stored version's shape symbols (the dynamic dimensions of its inputs)."""
    view = StoredView("ranges")
    return await _stored_view(request, registry, settings, name, ref, view)


async def _stored_view(
    request: Request,
    registry: Registry,
    settings: Settings,
    name: str,
    ref: str,
    view: StoredView,
) -> Response:
    """One view of a stored version, kept once computed (app.api.stored)."""
    info = await run_sync(registry.version, name, ref)
    number = str(info.version)
    if info.deleted_at is not None:
        await run_sync(registry.stored, name, number)  # refused: version-deleted
    model = info.archive_model
    kept = view.answer(info.digests.archive, model)

    def find() -> StoredArchive:
        return registry.stored(name, number)[1]

    def lookup() -> tuple[list[StoredArchive], tuple[StoredArchive, Settings, str, StoredView]]:
        stored = find()
        return [stored], (stored, settings, model, view)

    if view in PAGE_VIEWS and not held(request, cache_headers(kept)):
        await kept_page(request, registry.settings, info.digests.archive, model, find)
    return await on_stored(request, registry, kept, job_stored_view, lookup)
