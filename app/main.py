"""The FastAPI application: routers, problem handlers, settings and the torch worker pool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import Depends, FastAPI

from app.api import (
    catalogue,
    docs,
    health,
    org,
    programs,
    registry,
    schemas,
    search,
    ui,
    views,
    webhooks,
)
from app.api.auth import (
    AUTH_PROBLEMS,
    CREDENTIAL_PROBLEMS,
    read_or_stateless,
    stateless,
)
from app.api.deps import LazyTorchPool
from app.api.direct import DirectValidate
from app.api.headers import NoSniff, install_pages
from app.http import problems
from app.http.head import HeadAsGet
from app.http.problems import problem_responses
from app.settings import Settings
from app.workers.admission import Admission
from app.workers.runner import DocumentRunner


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service; torch workers start at the first torch job, not here."""
    settings = settings or Settings.from_env()
    pool = LazyTorchPool(settings)
    documents = DocumentRunner(settings)

    @asynccontextmanager
    async def lifespan(served: FastAPI) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(documents.start)
        # FastAPI builds each route's handler at its first request, or all of them at the first
        # OpenAPI document: 0.6-0.7 s on 2 cores, which every HTTP process paid on the first
        # visits after a restart. Built here, before this process takes a connection.
        await anyio.to_thread.run_sync(served.openapi)
        try:
            yield
        finally:
            pool.close()
            documents.close()

    app = FastAPI(
        title="pt2serde",
        version="0.1.0",
        summary="Serialize, deserialize, canonicalize and validate torch exported programs.",
        lifespan=lifespan,
        # served by app.api.headers with their Content-Security-Policy
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.pool = pool
    app.state.documents = documents
    app.state.admission = Admission.of(settings)
    for exc_type, handler in problems.HANDLERS.items():
        app.add_exception_handler(exc_type, handler)
    app.include_router(health.router)
    app.include_router(schemas.router)
    app.include_router(
        programs.router,
        dependencies=[Depends(stateless)],
        responses=problem_responses(*CREDENTIAL_PROBLEMS),
    )
    app.include_router(registry.router)
    app.include_router(search.router)
    app.include_router(webhooks.router)
    app.include_router(catalogue.router)
    app.include_router(
        views.router,
        dependencies=[Depends(read_or_stateless)],
        responses=problem_responses(*AUTH_PROBLEMS),
    )
    app.include_router(org.router)
    app.include_router(ui.router)
    ui.check_bundle()
    # matched before every other route: it declines what it does not answer as FastAPI's would
    app.router.routes.insert(0, DirectValidate(settings, documents.inline_bytes))
    docs.install(app)
    install_pages(app)
    app.add_middleware(NoSniff)
    app.add_middleware(HeadAsGet)
    return app


app = create_app()
