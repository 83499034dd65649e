"""Model registry endpoints: push, list, fetch, alias, tag and delete model versions.

Include `router` in the app: its lifespan opens the registry (migrations, then cleanup of what an
earlier crash left) when the app starts and closes it when the app stops.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, BackgroundTasks, Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field

from app.api import graphs
from app.api.auth import (
    AUTH_PROBLEMS,
    CallerDep,
    ManageDep,
    ReadDep,
    WriteDep,
    ensure,
    has,
)
from app.api.deps import PoolDep, SettingsDep, Work, admit_bytes, admit_files
from app.api.docs import READ_PROBLEMS, TORCH_PROBLEMS, request_body
from app.api.stored import diff_answer, kept, on_stored, run_sync
from app.archive import open_archive
from app.failure import ProblemCode
from app.http.problems import ServiceError, problem_responses
from app.http.ranges import bytes_response
from app.http.uploads import FormSplitter, PartHeader, content_type, stream_body
from app.jobs import push
from app.jobs.documents import job_stored_diff
from app.programs.diff import ProgramDiff, render_text
from app.registry.blobs import Staged
from app.registry.names import MAX_DESCRIPTION, MAX_VERSION, check_model_name
from app.registry.records import (
    AliasInfo,
    ModelInfo,
    ModelPage,
    PushedVersion,
    Verified,
    VersionInfo,
    VersionPage,
)
from app.registry.store import Registry
from app.registry.stored import StoredArchive
from app.settings import Settings


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    registry = await run_in_threadpool(Registry, app.state.settings)
    app.state.registry = registry
    try:
        yield
    finally:
        await run_in_threadpool(registry.close)


router = APIRouter(prefix="/v1", tags=["registry"], lifespan=_lifespan)

#: "" and octet-stream say nothing: the first bytes must then be a zip's.
_ARCHIVE_TYPES = {"application/zip", "application/x-zip-compressed", "application/octet-stream", ""}
_ZIP = "application/zip"
_JSON = "application/json"
_FILE_PARTS = ("file", "archive")

_NAME_PROBLEMS: tuple[ProblemCode, ...] = (
    *AUTH_PROBLEMS,
    "invalid-name",
    "model-not-found",
    "registry-unavailable",
    "request-invalid",
)
_REF_PROBLEMS: tuple[ProblemCode, ...] = (*_NAME_PROBLEMS, "version-not-found", "alias-not-found")
_CONTENT_PROBLEMS: tuple[ProblemCode, ...] = (*_REF_PROBLEMS, "version-deleted")
#: an answer of stored bytes (app.http.ranges): no range inside it, or a client over its cap
_DOWNLOAD_PROBLEMS: tuple[ProblemCode, ...] = ("range-not-satisfiable", "too-many-downloads")
_PUSH_PROBLEMS: tuple[ProblemCode, ...] = (
    *AUTH_PROBLEMS,
    "rate-limited",
    "quota-exceeded",
    "invalid-name",
    "invalid-program",
    "registry-unavailable",
    *READ_PROBLEMS,
    "ambiguous-model",
    "unknown-model",
    "version-not-found",
    "service-busy",
    *TORCH_PROBLEMS,
)


def registry_of(request: Request) -> Registry:
    """The app's registry (opened by this router's lifespan)."""
    registry: Registry = request.app.state.registry
    return registry


RegistryDep = Annotated[Registry, Depends(registry_of)]


class _ArchivePart:
    """The form's one part, the .pt2 (field `file` or `archive`), written into the staged blob."""

    def __init__(self, staged: Staged) -> None:
        self.staged = staged
        self.found = False

    def begin_part(self, header: PartHeader) -> Callable[[bytes], object]:
        """The staged blob's writer, for the first archive field only."""
        if header.name not in _FILE_PARTS or self.found:
            raise ServiceError(
                "bad-multipart", f"send one form field 'file' with the .pt2, not {header.name!r}"
            )
        self.found = True
        return self.staged.write

    def end_part(self, header: PartHeader, size: int) -> None:
        """Nothing to close: the staged blob is finished once the body is whole."""


async def _receive(request: Request, staged: Staged, settings: Settings) -> None:
    """Stream the body (a .pt2, raw or as the form field `file`) into `staged`, capped."""
    media, options = content_type(request)
    limit = settings.max_upload_bytes
    if media == "multipart/form-data":
        parts = settings.max_form_parts
        splitter = FormSplitter(options.get(b"boundary"), _ArchivePart(staged), parts)
        await stream_body(request, limit, splitter.feed, settings.body_idle_timeout_s)
        splitter.finish()
    elif media in _ARCHIVE_TYPES:
        await stream_body(request, limit, staged.write, settings.body_idle_timeout_s)
    else:
        raise ServiceError(
            "unsupported-media-type",
            f"send a .pt2 as application/zip or multipart/form-data, not {media!r}",
        )
    await run_in_threadpool(staged.finish)
    if staged.head(2) != b"PK":
        raise ServiceError("unsupported-media-type", "the body is not a .pt2 (zip) archive")


async def staged_upload(
    request: Request, name: str, registry: RegistryDep
) -> AsyncIterator[Staged]:
    """The uploaded .pt2 in the registry's staging area, removed unless stored."""
    check_model_name(name)
    settings: Settings = request.app.state.settings
    staged = registry.blobs.stage()
    try:
        await _receive(request, staged, settings)
        yield staged
    finally:
        staged.discard()


#: removed as soon as the route returns: at request scope the upload stayed staged until the
#: response was sent and its background task (the graph answer, seconds for a large program) ended
StagedDep = Annotated[Staged, Depends(staged_upload, scope="function")]


async def admitted_push(request: Request, staged: StagedDep) -> AsyncIterator[Work]:
    """Admission control for a push: vetting the archive reads its documents (in a document
    worker past document_inline_bytes), so its estimated memory need is held within the budget
    while the route works."""
    async for granted in admit_files(request, [staged.path]):
        yield granted


#: released as soon as the route returns, as the program routes' admission is
AdmittedDep = Annotated[Work, Depends(admitted_push, scope="function")]


def _digest_headers(info: VersionInfo) -> dict[str, str]:
    return {
        "X-Program-Digest": info.digests.program,
        "X-Graph-Digest": info.digests.graph,
        "X-Weights-Digest": info.digests.weights,
        "X-Archive-Digest": info.digests.archive,
    }


# ---------------------------------------------------------------- routes

_BYTES = {"schema": {"type": "string", "format": "binary"}}


@router.get(
    "/models",
    response_model=ModelPage,
    responses=problem_responses(*AUTH_PROBLEMS, "registry-unavailable", "request-invalid"),
)
def list_models(
    who: CallerDep,
    registry: RegistryDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: str | None = None,
) -> ModelPage:
    """Models in name order, a page at a time (`after`: the previous page's `next`); only those
    the caller may read (filtered before paging: `next` says nothing of the others)."""
    return registry.models(limit, after, reader=who.identity)


@router.get(
    "/models/{name}", response_model=ModelInfo, responses=problem_responses(*_NAME_PROBLEMS)
)
def get_model(name: str, who: ReadDep, registry: RegistryDep) -> ModelInfo:
    """A model: its newest version, how many versions are live, its aliases."""
    return registry.model(name)


@router.post(
    "/models/{name}/versions",
    status_code=201,
    response_model=PushedVersion,
    openapi_extra=request_body("file", json=None),
    responses={
        200: {"model": PushedVersion, "description": "The program is already this live version"},
        201: {"description": "A new version (Location: its URL)"},
        **problem_responses(*_PUSH_PROBLEMS),
    },
)
def push_version(
    name: str,
    who: WriteDep,
    staged: StagedDep,
    work: AdmittedDep,
    pool: PoolDep,
    registry: RegistryDep,
    response: Response,
    background: BackgroundTasks,
    model: str | None = None,
    parent: Annotated[int | None, Query(ge=1, le=MAX_VERSION)] = None,
) -> PushedVersion:
    """Upload a .pt2 (validated at level torch; refused with the report's errors if invalid).

    What is stored and served is an archive our writer makes from the checked program: sample
    inputs torch's weights_only loader cannot be proven to read are left out (a warning says
    so). The same program (by program digest) pushed again answers its existing version with
    200. Its tensors are stored as deltas of those of version `parent` (a live version;
    default: the latest) where that is smaller."""
    files = push.PushFiles(Path(tempfile.mkdtemp(prefix="pt2serde-push-")))
    try:
        candidate = push.prepare(registry, staged.path, work, pool, model, files)
        pushed = registry.push(name, candidate, who.actor, parent)
    except BaseException:
        shutil.rmtree(files.folder, ignore_errors=True)
        raise
    info = pushed.version
    response.status_code = 201 if pushed.created else 200
    response.headers["Location"] = f"/v1/models/{name}/versions/{info.version}"
    # its graph is built once the push has answered (from the document it checked, which the
    # task then removes), so that its first view is served ready
    background.add_task(graphs.warm, registry, work.runner, info, files)
    return PushedVersion(**info.model_dump(), warnings=pushed.warnings)


@router.get(
    "/models/{name}/versions",
    response_model=VersionPage,
    responses=problem_responses(*_NAME_PROBLEMS),
)
def list_versions(
    name: str,
    who: ReadDep,
    registry: RegistryDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Annotated[int | None, Query(ge=0, le=MAX_VERSION)] = None,
    include_deleted: bool = False,
) -> VersionPage:
    """A model's versions in number order, a page at a time."""
    return registry.versions(name, limit, after, include_deleted)


@router.get(
    "/models/{name}/versions/{ref}",
    response_model=VersionInfo,
    responses=problem_responses(*_REF_PROBLEMS),
)
def get_version(name: str, ref: str, who: ReadDep, registry: RegistryDep) -> VersionInfo:
    """A version's metadata (`ref`: a number, an alias or ``latest``), deleted ones included."""
    return registry.version(name, ref)


@router.delete(
    "/models/{name}/versions/{ref}",
    response_model=VersionInfo,
    responses=problem_responses(*_CONTENT_PROBLEMS, "version-has-aliases"),
)
def delete_version(
    name: str,
    ref: str,
    who: ManageDep,
    registry: RegistryDep,
    reason: Annotated[str, Query(min_length=1, max_length=2000)],
    detach_aliases: Annotated[
        bool, Query(description="remove the aliases naming it (else: 409 version-has-aliases)")
    ] = False,
) -> VersionInfo:
    """Soft-delete a version: it stays listed with the reason; its blobs are collected once no
    live version refers to them. A version aliases name is refused (409) unless
    `detach_aliases`, which removes them, each recorded in the audit log."""
    return registry.delete_version(name, ref, reason, who.actor, detach_aliases)


@router.post(
    "/models/{name}/versions/{ref}/verify",
    response_model=VersionInfo,
    responses=problem_responses(
        *_CONTENT_PROBLEMS,
        "invalid-program",
        "namespace-unregistered",
        "service-busy",
        "torch-unavailable",
        *TORCH_PROBLEMS,
    ),
)
async def verify_version(
    name: str, ref: str, who: WriteDep, request: Request, pool: PoolDep, registry: RegistryDep
) -> VersionInfo:
    """Run torch's check of an unverified version again (in a torch worker, which needs the
    namespaces it lacked in PT2SERDE_WORKER_IMPORTS) and record it verified (audited,
    `version.verified` event). A version already verified is answered as it is. While the
    workers still lack a namespace: 409 namespace-unregistered; when torch finds the program
    wrong: 422 invalid-program; the state stays as it was. Who may push to the model may ask."""
    info, stored = await run_sync(registry.stored, name, ref)
    if isinstance(info.verification, Verified):
        return info
    async with admit_bytes(request, stored.document_bytes) as work:
        return await run_sync(push.reverify, registry, info, stored, work, pool, who.actor)


@router.get(
    "/models/{name}/versions/{ref}/archive",
    response_class=Response,
    responses={
        200: {"content": {_ZIP: _BYTES}, "description": "The .pt2 the registry wrote"},
        206: {"description": "The requested byte range (several: multipart/byteranges)"},
        304: {"description": "If-None-Match matched the ETag (the archive digest)"},
        **problem_responses(*_CONTENT_PROBLEMS, *_DOWNLOAD_PROBLEMS),
    },
)
def get_archive(
    name: str, ref: str, who: ReadDep, request: Request, registry: RegistryDep
) -> Response:
    """The .pt2, streamed; ETag is its sha256 (the archive digest, which covers every byte
    served); Range and If-None-Match are honoured."""
    info, handle = registry.open_content(name, ref, "archive")
    headers = {
        **_digest_headers(info),
        "Content-Disposition": f'attachment; filename="{info.model}-v{info.version}.pt2"',
    }
    return bytes_response(request, handle, info.digests.archive, _ZIP, headers)


@router.get(
    "/models/{name}/versions/{ref}/document",
    response_class=Response,
    responses={
        200: {"content": {_JSON: {"schema": {"type": "object"}}}, "description": "torch's JSON"},
        **problem_responses(*_CONTENT_PROBLEMS),
    },
)
def get_document(
    name: str, ref: str, who: ReadDep, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """The program's document as the archive holds it (torch's wire JSON)."""
    info, handle = registry.open_content(name, ref, "archive")
    with handle, open_archive(handle, settings.limits) as archive:
        data = archive.documents[info.archive_model]
    return Response(data, media_type=_JSON, headers=_digest_headers(info))


@router.get(
    "/models/{name}/versions/{ref}/canonical",
    response_class=Response,
    responses={
        200: {
            "content": {_JSON: {"schema": {"type": "object"}}},
            "description": "The canonical document (its sha256 is the graph digest, the ETag)",
        },
        206: {"description": "The requested byte range (several: multipart/byteranges)"},
        304: {"description": "If-None-Match matched the ETag"},
        **problem_responses(*_CONTENT_PROBLEMS, *_DOWNLOAD_PROBLEMS),
    },
)
def get_canonical(
    name: str, ref: str, who: ReadDep, request: Request, registry: RegistryDep
) -> Response:
    """The canonical document's bytes, with the digests as headers."""
    info, handle = registry.open_content(name, ref, "canonical")
    return bytes_response(request, handle, info.digests.graph, _JSON, _digest_headers(info))


@router.get(
    "/models/{name}/versions/{ref}/diff",
    response_model=ProgramDiff,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        **problem_responses(*_CONTENT_PROBLEMS),
    },
)
async def get_diff(
    name: str,
    ref: str,
    who: ReadDep,
    against: Annotated[
        str, Query(description="a version of this model, or `model:ref` of another one")
    ],
    request: Request,
    registry: RegistryDep,
    settings: SettingsDep,
    format: Literal["json", "text"] = "json",
) -> Response:
    """What changed from version `against` (number, alias or ``latest``; ``model:ref`` for a
    version of another model, as model names have no colon) to this one: two registry versions
    diff without uploading either. `format=text` gives it as `POST /v1/diff` does, for people."""
    other, _, against_ref = against.rpartition(":")
    if other:
        await run_sync(ensure, registry, who, other, "read")
    was = await run_sync(registry.version, other or name, against_ref)
    now = await run_sync(registry.version, name, ref)
    for info in (was, now):
        if info.deleted_at is not None:
            await run_sync(registry.stored, info.model, str(info.version))  # version-deleted
    answer, model = diff_answer(was, was.digests.archive, now, now.digests.archive)

    def lookup() -> tuple[
        list[StoredArchive], tuple[StoredArchive, StoredArchive, Settings, str | None]
    ]:
        _, old = registry.stored(was.model, str(was.version))
        _, new = registry.stored(now.model, str(now.version))
        return [old, new], (old, new, settings, model)

    if format == "json":
        return await on_stored(request, registry, answer, job_stored_diff, lookup)
    # the kept answer is the JSON one; a diff is far smaller than the programs it compares
    path = await kept(request, registry, answer, job_stored_diff, lookup)
    diff = await run_sync(ProgramDiff.model_validate_json, await run_sync(path.read_bytes))
    return Response(render_text(diff), media_type="text/plain")


class Description(BaseModel):
    """A model's description (null removes it)."""

    description: str | None = Field(max_length=MAX_DESCRIPTION)


@router.put(
    "/models/{name}/description",
    response_model=ModelInfo,
    responses=problem_responses(*_NAME_PROBLEMS, "bad-request"),
)
def put_description(
    name: str, body: Description, who: WriteDep, registry: RegistryDep
) -> ModelInfo:
    """Describe the model for people (null: remove its description); audited as
    ``model.describe``. Who may push to the model may describe it."""
    return registry.describe(name, body.description, who.actor)


class TagValue(BaseModel):
    """A tag's value."""

    value: str = Field(max_length=4096)


@router.put(
    "/models/{name}/versions/{ref}/tags/{key}",
    response_model=VersionInfo,
    responses=problem_responses(*_CONTENT_PROBLEMS, "bad-request", "quota-exceeded"),
)
def put_tag(
    name: str, ref: str, key: str, body: TagValue, who: WriteDep, registry: RegistryDep
) -> VersionInfo:
    """Set a free-form tag on a live version."""
    return registry.set_tag(name, ref, key, body.value, who.actor)


@router.delete(
    "/models/{name}/versions/{ref}/tags/{key}",
    response_model=VersionInfo,
    responses=problem_responses(*_CONTENT_PROBLEMS, "tag-not-found"),
)
def delete_tag(name: str, ref: str, key: str, who: WriteDep, registry: RegistryDep) -> VersionInfo:
    """Remove a tag from a live version."""
    return registry.delete_tag(name, ref, key, who.actor)


class AliasTarget(BaseModel):
    """The version an alias names."""

    version: int = Field(ge=1, le=MAX_VERSION)
    #: mark (True) or unmark (False) the alias protected; None keeps its mark. Needs manage.
    protected: bool | None = None


@router.put(
    "/models/{name}/aliases/{alias}",
    response_model=AliasInfo,
    responses=problem_responses(
        *_CONTENT_PROBLEMS, "bad-request", "alias-protected", "quota-exceeded"
    ),
)
def put_alias(
    name: str, alias: str, body: AliasTarget, who: WriteDep, registry: RegistryDep
) -> AliasInfo:
    """Point an alias (``champion``, ``staging``, ...) at a live version, or move it. A
    protected alias (``protected``: true), and the mark itself, need manage; others write."""
    manage = has(registry, who, name, "manage")
    return registry.set_alias(name, alias, body.version, who.actor, body.protected, manage)


@router.delete(
    "/models/{name}/aliases/{alias}",
    status_code=204,
    response_class=Response,
    responses=problem_responses(*_REF_PROBLEMS, "alias-protected"),
)
def delete_alias(name: str, alias: str, who: WriteDep, registry: RegistryDep) -> Response:
    """Remove an alias (a protected one needs manage)."""
    registry.delete_alias(name, alias, who.actor, has(registry, who, name, "manage"))
    return Response(status_code=204)


@router.get(
    "/blobs/{digest}",
    response_class=Response,
    responses={
        200: {"content": {_ZIP: _BYTES, _JSON: {}}, "description": "A .pt2 or canonical document"},
        206: {"description": "The requested byte range (several: multipart/byteranges)"},
        304: {"description": "If-None-Match matched the ETag (the digest)"},
        **problem_responses(
            *AUTH_PROBLEMS, "blob-not-found", "registry-unavailable", *_DOWNLOAD_PROBLEMS
        ),
    },
)
def get_blob(digest: str, who: CallerDep, request: Request, registry: RegistryDep) -> Response:
    """A stored blob by its sha256 (a .pt2 or a canonical document a live version refers to),
    for a caller who may read a model with such a version."""
    registry.access.ensure_blob(who.identity, digest)
    kind, handle = registry.open_blob(digest)
    return bytes_response(request, handle, digest, _ZIP if kind == "archive" else _JSON, {})


def _options(methods: list[str]) -> Callable[[], Response]:
    allow = ", ".join(sorted(methods))

    def options() -> Response:
        return Response(status_code=204, headers={"Allow": allow})

    return options


def _answer_options() -> None:
    """OPTIONS on every registry path, with Allow listing all of the path's methods: the router
    would otherwise answer 405 with the methods of the first route of that path only."""
    methods: dict[str, list[str]] = {}
    for route in router.routes:
        if isinstance(route, APIRoute):
            methods.setdefault(route.path, []).extend(route.methods or ())
    for path, allowed in methods.items():
        router.add_api_route(
            path.removeprefix(router.prefix),
            _options(allowed),
            methods=["OPTIONS"],
            include_in_schema=False,
        )


_answer_options()
