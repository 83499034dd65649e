"""Answers about stored versions (their views, validation, ranges, tensors, graphs and diffs):
computed once from the stored archives, under the same admission budget an upload of their
documents gets and in a document worker when they are large, then kept on disk by the digests
they are computed from (app/registry/answers.py): stored versions never change, so every later
reader, after a restart or on another replica, gets the kept file, and a client holding it
revalidates for nothing (the answer's name is its ETag)."""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

import anyio
from fastapi import Request
from fastapi.responses import FileResponse, Response

from app import operations as ops
from app.api.deps import admit_bytes
from app.failure import Failure
from app.http.ranges import etag_matches
from app.jobs.documents import StoredView, job_stored_diff, job_stored_views
from app.registry.answers import answer_name, answer_path, answers_folder, view_name
from app.registry.records import VersionInfo
from app.registry.store import Registry
from app.registry.stored import StoredArchive
from app.settings import Settings
from app.workers.runner import DocumentRunner

_JSON = "application/json"
_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")
#: the views the version page asks for (app/ui/pages/version.js), computed after a push, ahead
#: of the page's first visit
PAGE_VIEWS = (
    StoredView("ranges"),
    StoredView("inspect", inspect=ops.InspectRequest("modules")),
    StoredView("inspect", inspect=ops.InspectRequest("weights")),
    StoredView("inspect", inspect=ops.InspectRequest("operators")),
    StoredView("validate", level="semantic"),
    StoredView("tensors"),
)
#: one computation per answer at a time in this process: readers arriving meanwhile wait for it
_computing: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


async def run_sync(call: Callable[..., _T], *args: Any) -> _T:
    """`call(*args)` on a worker thread (registry lookups are database I/O)."""
    return await anyio.to_thread.run_sync(functools.partial(call, *args))


def cache_headers(name: str) -> dict[str, str]:
    """The headers of the kept answer `name`: its name as the ETag, revalidated before each use
    (a 304 without a body when the client holds it). Not `immutable`, even under a version
    number, which names one archive for good: an upgraded service may answer the same address
    in a new format (`answers.FORMAT`), which a browser keeping the old for good would never
    ask for. Private: reading may need a token."""
    return {"ETag": f'"{name}"', "Cache-Control": "private, no-cache"}


def held(request: Request, headers: dict[str, str]) -> bool:
    """Whether the client holds the answer `headers` name (If-None-Match)."""
    return etag_matches(request.headers.get("if-none-match"), headers["ETag"])


#: what a kept answer is computed from, looked up only when it is computed (reading a stored
#: archive's zip directory costs a tenth of a second on a large one): the archives, and the
#: job's arguments before the path it writes
Lookup = Callable[[], tuple[list[StoredArchive], tuple[*_Ts]]]


async def on_stored(
    request: Request,
    registry: Registry,
    name: str,
    job: Callable[[*_Ts, Path], None],
    lookup: Lookup[*_Ts],
) -> Response:
    """The kept answer `name` (`kept`), or 304 to a client that holds it."""
    headers = cache_headers(name)
    if held(request, headers):
        return Response(status_code=304, headers=headers)
    path = await kept(request, registry, name, job, lookup)
    return FileResponse(path, media_type=_JSON, headers=headers)


async def kept(
    request: Request,
    registry: Registry,
    name: str,
    job: Callable[[*_Ts, Path], None],
    lookup: Lookup[*_Ts],
) -> Path:
    """The file of the kept answer `name`, which `job` (a job of app.jobs) writes from the
    archives and arguments `lookup` finds to the path it is given last: computed once, under
    the admission budget an upload of their documents would get, in a document worker when they
    are large (never parsed in this process above the inline size); later readers get the
    file."""
    path = answer_path(registry.settings, name)
    if not path.exists():
        lock = _computing.setdefault(name, asyncio.Lock())
        async with lock:
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                stored, args = await run_sync(lookup)
                size = sum(archive.document_bytes for archive in stored)
                async with admit_bytes(request, size) as work:
                    await run_sync(work.run, job, *args, path)
    return path


def diff_answer(was: VersionInfo, old: str, now: VersionInfo, new: str) -> tuple[str, str | None]:
    """The name of the kept diff from version `was` (archive digest `old`) to `now` (`new`),
    and the model it compares (None: the archives' only models, named differently)."""
    model = now.archive_model if was.archive_model == now.archive_model else None
    return answer_name([old, new], view_name("diff", model)), model


def _missing_page(settings: Settings, digest: str, model: str) -> list[tuple[StoredView, Path]]:
    """The version page's views of the archive `digest` not kept yet, with where each goes."""
    views = [(v, answer_path(settings, v.answer(digest, model))) for v in PAGE_VIEWS]
    return [(view, path) for view, path in views if not path.exists()]


async def kept_page(
    request: Request, settings: Settings, digest: str, model: str, find: Callable[[], StoredArchive]
) -> None:
    """Compute the version page's views of the archive `digest` (`find` looks it up) that are
    not kept yet, together: the page asks for six at once, which would otherwise read the same
    program six times at once (and past the admission budget for a large one). A view that
    fails is left to its own request, which answers its problem."""
    if not _missing_page(settings, digest, model):
        return
    lock = _computing.setdefault(f"{digest}.page", asyncio.Lock())
    async with lock:
        if _missing_page(settings, digest, model):
            stored = await run_sync(find)
            missing = _missing_page(settings, digest, model)
            answers_folder(settings).mkdir(parents=True, exist_ok=True)
            async with admit_bytes(request, stored.document_bytes) as work:
                await run_sync(work.run, job_stored_views, stored, settings, model, missing)


def warm(registry: Registry, runner: DocumentRunner, info: VersionInfo) -> None:
    """Compute a freshly pushed version's page views (from one reading of its archive) and its
    diff from the version before it, ahead of their first visit (a background task, in a
    document worker whatever the size: a view that fails answers its problem when asked)."""
    settings = registry.settings
    _, stored = registry.stored(info.model, str(info.version))
    model = info.archive_model
    missing = _missing_page(settings, stored.digest, model)
    limit = runner.spec.time_limit(stored.document_bytes)
    if missing:
        answers_folder(settings).mkdir(parents=True, exist_ok=True)
        runner.submit(job_stored_views, stored, settings, model, missing, timeout_s=limit)
    if info.version == 1:
        return
    try:
        was, old = registry.stored(info.model, str(info.version - 1))
    except Failure:
        return  # the version before is deleted
    name, compared = diff_answer(was, old.digest, info, stored.digest)
    path = answer_path(settings, name)
    if not path.exists():
        limit = runner.spec.time_limit(old.document_bytes + stored.document_bytes)
        runner.submit(job_stored_diff, old, stored, settings, compared, path, timeout_s=limit)
