"""Request dependencies: settings, the lazily started torch pool, uploaded bodies, and files
that response bodies are written to."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Literal

from fastapi import Depends, Query, Request

from app import operations as ops
from app.api.uploads import Upload, receive
from app.bridge import WorkerPool
from app.settings import Settings


class LazyPool:
    """The torch worker pool, started by the first torch job (or a readiness probe)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._pool: WorkerPool | None = None
        self._lock = threading.Lock()
        self._ready = False

    def get(self) -> WorkerPool:
        """The pool, starting it on first use."""
        with self._lock:
            if self._pool is None:
                self._pool = WorkerPool(self._settings)
            return self._pool

    def submit(self, job: str, *args: object) -> object:
        """Run a job of app.bridge.jobs in a worker (see WorkerPool.submit)."""
        result = self.get().submit(job, *args)
        self._ready = True
        return result

    def ready(self) -> bool:
        """Whether a worker has answered a job; probes with a ping when none has yet."""
        if not self._ready:
            self.submit("job_ping")
        return self._ready

    def close(self) -> None:
        """Stop the workers, if they were started."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


def settings_of(request: Request) -> Settings:
    """The app's settings."""
    settings: Settings = request.app.state.settings
    return settings


def pool_of(request: Request) -> LazyPool:
    """The app's torch pool."""
    pool: LazyPool = request.app.state.pool
    return pool


async def upload(request: Request) -> AsyncIterator[Upload]:
    """The request body on disk (streamed, capped), removed after the request."""
    async with receive(request, settings_of(request)) as received:
        yield received


def output() -> Iterator[Path]:
    """Where a response body is written before it is sent (by a torch worker, or a zip being
    built): a path in a fresh temporary folder, removed with the folder once the response has
    been sent (FastAPI runs this exit after the response, as it does the upload's)."""
    folder = Path(tempfile.mkdtemp(prefix="pt2serde-output-"))
    try:
        yield folder / "body"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def inspect_request(
    view: ops.View = "modules",
    depth: Annotated[int, Query(ge=0, le=1000)] = 1,
    stages: Annotated[int, Query(ge=1, le=10_000)] = 2,
    by: Literal["param_bytes", "nodes"] = "param_bytes",
    supported: Annotated[list[str] | None, Query()] = None,
    allow_single_node: bool = False,
) -> ops.InspectRequest:
    """The view an inspect route is asked for, and its knobs (the same query for every route)."""
    return ops.InspectRequest(view, depth, stages, by, tuple(supported or ()), allow_single_node)


SettingsDep = Annotated[Settings, Depends(settings_of)]
PoolDep = Annotated[LazyPool, Depends(pool_of)]
UploadDep = Annotated[Upload, Depends(upload)]
OutputDep = Annotated[Path, Depends(output)]
InspectDep = Annotated[ops.InspectRequest, Depends(inspect_request)]
