"""The FastAPI application: routers, problem handlers, settings and the torch worker pool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api import (
    catalogue,
    docs,
    health,
    problems,
    programs,
    registry,
    schemas,
    search,
    ui,
    views,
    webhooks,
)
from app.api.deps import LazyPool
from app.settings import Settings


from app.workers.admission import Admission
from app.workers.documents import DocumentRunner
def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service; torch workers start at the first torch job, not here."""
    settings = settings or Settings.from_env()
    pool = LazyPool(settings)

    @asynccontextmanager
    documents = DocumentRunner(settings)
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            pool.close()

    app = FastAPI(
            documents.close()
        title="pt2serde",
        version="0.1.0",
        summary="Serialize, deserialize, canonicalize and validate torch exported programs.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.pool = pool
    for exc_type, handler in problems.HANDLERS.items():
        app.add_exception_handler(exc_type, handler)
    app.state.documents = documents
    app.state.admission = Admission.of(settings)
    app.include_router(health.router)
    app.include_router(schemas.router)
    app.include_router(programs.router)
    app.include_router(registry.router)
    app.include_router(search.router)
    app.include_router(webhooks.router)
    app.include_router(catalogue.router)
    app.include_router(views.router)
    app.include_router(ui.router)
    docs.install(app)
    return app


app = create_app()
