"""Request dependencies: settings, the lazily started torch pool, uploaded bodies, and files
that response bodies are written to."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal, TypeVar, TypeVarTuple

import anyio.to_thread
from fastapi import Depends, Query, Request
from pydantic import AwareDatetime, BeforeValidator

from app import operations as ops
from app.http.uploads import Upload, content_type, receive, stream_body
from app.jobs.torch import job_ping, job_torch_version
from app.settings import Settings
from app.workers import pool as workers
from app.workers.admission import Admission, documents_bytes, memory_need
from app.workers.runner import DocumentRunner
from app.workers.torch import torch_spec

R = TypeVar("R")
Ts = TypeVarTuple("Ts")


class LazyTorchPool(workers.LazyPool):
    """The torch worker pool, started by the first torch job (or a readiness probe)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(torch_spec(settings))
        self._ready = False
        self._torch: str | None = None

    def submit(self, job: Callable[[*Ts], R], *args: *Ts, timeout_s: float | None = None) -> R:
        """Run a job of app.jobs.torch in a worker (see WorkerPool.submit)."""
        result = super().submit(job, *args, timeout_s=timeout_s)
        self._ready = True
        return result

    def ready(self) -> bool:
        """Whether a worker has answered a job; probes with a ping when none has yet."""
        if not self._ready:
            self.submit(job_ping)
        return self._ready

    def torch_version(self) -> str:
        """The torch version a worker runs (`2.15.0+cu132`), as the worker reports it."""
        if self._torch is None:
            self._torch = self.submit(job_torch_version)
        return self._torch


def settings_of(request: Request) -> Settings:
    """The app's settings."""
    settings: Settings = request.app.state.settings
    return settings


def pool_of(request: Request) -> LazyTorchPool:
    """The app's torch pool."""
    pool: LazyTorchPool = request.app.state.pool
    return pool


def documents_of(request: Request) -> DocumentRunner:
    """The app's runner of document jobs (its pool starts with the first large upload)."""
    runner: DocumentRunner = request.app.state.documents
    return runner


async def settings_dep(request: Request) -> Settings:
    """`settings_of` as a dependency: a coroutine, so FastAPI calls it on the event loop rather
    than handing it to a thread (each hop costs a thread wake-up and an event-loop turn)."""
    return settings_of(request)


async def pool_dep(request: Request) -> LazyTorchPool:
    """`pool_of` as a dependency (a coroutine, as `settings_dep`)."""
    return pool_of(request)


async def upload(request: Request) -> AsyncIterator[Upload]:
    """The request body on disk (streamed, capped), removed after the request."""
    async with receive(request, settings_of(request)) as received:
        yield received


@dataclass(frozen=True)
class Body:
    """A plain JSON request body small enough to be checked in this process, held in memory:
    writing it to a file of its own folder, reading it back and removing both cost more than
    half a millisecond, a tenth of checking a 100-node program."""

    data: bytes


#: What a route that reads one program (and maybe weights) receives.
Received = Upload | Body


def memory_body(request: Request, inline_bytes: int) -> bool:
    """Whether the body is declared JSON with a length that its runner checks in process."""
    length = request.headers.get("content-length", "")
    if not length.isdigit() or int(length) > inline_bytes:
        return False
    return content_type(request)[0] == "application/json"


@asynccontextmanager
async def _program_upload(request: Request) -> AsyncIterator[Received]:
    """`upload`, or for a small JSON body (at most document_inline_bytes), its bytes."""
    settings = settings_of(request)
    if not memory_body(request, documents_of(request).inline_bytes):
        async with receive(request, settings) as received:
            yield received
        return
    chunks: list[bytes] = []
    idle = settings.body_idle_timeout_s
    await stream_body(request, settings.max_upload_bytes, chunks.append, idle)
    yield Body(b"".join(chunks))


@dataclass(frozen=True)
class Work:
    """A request admitted to do document work, and the bytes of documents its estimate counted
    (what decides whether the work runs in this process or in a document worker)."""

    runner: DocumentRunner
    document_bytes: int

    def run(self, job: Callable[[*Ts], R], *args: *Ts) -> R:
        """`job(*args)` here or in a document worker (`DocumentRunner.run`)."""
        return self.runner.run(self.document_bytes, job, *args)


@dataclass(frozen=True)
class Program(Work):
    """A program (and maybe weights) a request uploaded, admitted to be worked on."""

    received: Received


async def admit(request: Request, received: Received) -> AsyncIterator[Work]:
    """Hold the upload's estimated memory need within the process's admission budget while the
    route works (waiting on the event loop, or 503 service-busy past the queue)."""
    paths: list[Path] = []
    size: int | None
    if isinstance(received, Body):
        size = len(received.data)
    elif any(part.media == "zip" for part in received.parts.values()):
        size, paths = None, [part.path for part in received.parts.values()]
    else:
        # only an archive's documents need its zip directory read: any other part is its size
        size = sum(part.size for part in received.parts.values())
    async for granted in _admit_sized(request, size, paths):
        yield granted


async def admit_files(request: Request, paths: list[Path]) -> AsyncIterator[Work]:
    """`admit` for uploaded files at `paths` (a registry push's staged archive, say)."""
    async for granted in _admit_sized(request, None, paths):
        yield granted


@asynccontextmanager
async def admit_bytes(request: Request, size: int) -> AsyncIterator[Work]:
    """`admit` for `size` bytes of documents the service holds (a stored version's)."""
    async for granted in _admit_sized(request, size, []):
        yield granted


async def _admit_sized(
    request: Request, size: int | None, paths: list[Path]
) -> AsyncIterator[Work]:
    """`admit` for `size` bytes of documents, or (None) for those of the files at `paths`."""
    if size is None:
        # reading zip directories is file I/O: off the event loop
        limits = settings_of(request).limits
        size = await anyio.to_thread.run_sync(documents_bytes, paths, limits)
    admission: Admission = request.app.state.admission
    async with admission.admit(memory_need(size)):
        yield Work(documents_of(request), size)


async def admitted(request: Request, received: UploadDep) -> AsyncIterator[Work]:
    """`admit` for the request's upload."""
    async for granted in admit(request, received):
        yield granted


@asynccontextmanager
async def admitted_program(request: Request) -> AsyncIterator[Program]:
    """The request's program received and admitted (the upload removed and the admission given
    back when the block ends)."""
    async with _program_upload(request) as received:
        async for work in admit(request, received):
            yield Program(work.runner, work.document_bytes, received)


async def program(request: Request) -> AsyncIterator[Program]:
    """`admitted_program` as one dependency: FastAPI spends tens of microseconds of the event
    loop on each dependency of each request."""
    async with admitted_program(request) as admitted:
        yield admitted


def output() -> Iterator[Path]:
    """Where a response body is written before it is sent (by a torch worker, or a zip being
    built): a path in a fresh temporary folder, removed with the folder once the response has
    been sent (FastAPI runs this exit after the response, as it does the upload's)."""
    folder = Path(tempfile.mkdtemp(prefix="pt2serde-output-"))
    try:
        yield folder / "body"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Scratch:
    """A file for a route's own use (a checked document handed to a torch job, say), in a
    temporary folder made only if the path is asked for (making and removing one costs a fifth
    of a millisecond) and removed, if made, when the block ends."""

    def __init__(self) -> None:
        self._folder: Path | None = None

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    @property
    def path(self) -> Path:
        """The file's path, in a temporary folder made now if not yet."""
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="pt2serde-scratch-"))
        return self._folder / "file"


async def inspect_request(
    view: ops.View = "modules",
    depth: Annotated[int, Query(ge=0, le=1000)] = 1,
    stages: Annotated[int, Query(ge=1, le=10_000)] = 2,
    by: Literal["param_bytes", "nodes"] = "param_bytes",
    supported: Annotated[list[str] | None, Query()] = None,
    allow_single_node: bool = False,
) -> ops.InspectRequest:
    """The view an inspect route is asked for, and its knobs (the same query for every route)."""
    return ops.InspectRequest(view, depth, stages, by, tuple(supported or ()), allow_single_node)


SettingsDep = Annotated[Settings, Depends(settings_dep)]
PoolDep = Annotated[LazyTorchPool, Depends(pool_dep)]
UploadDep = Annotated[Upload, Depends(upload)]
#: released as soon as the route returns, not once its response is sent
WorkDep = Annotated[Work, Depends(admitted, scope="function")]
#: the upload too is removed as soon as the route returns
ProgramDep = Annotated[Program, Depends(program, scope="function")]
OutputDep = Annotated[Path, Depends(output)]
InspectDep = Annotated[ops.InspectRequest, Depends(inspect_request)]


_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _rfc3339(value: object) -> object:
    """Date-time text only: pydantic would also read a number, or numeric text, as a Unix time,
    which OpenAPI's `date-time` (what the routes document) does not allow. The offset is
    required too (as RFC 3339 requires it): a naive time means no instant, and comparing one
    with an aware time fails."""
    if isinstance(value, datetime) or (isinstance(value, str) and _RFC3339.match(value)):
        return value
    raise ValueError("expected an RFC 3339 date-time with an offset, such as 2026-11-01T00:00:00Z")


#: a date-time parameter or field, as RFC 3339 text with its offset
DateTime = Annotated[AwareDatetime, BeforeValidator(_rfc3339)]
