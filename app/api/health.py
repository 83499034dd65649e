"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from app.api.deps import PoolDep
from app.http.problems import problem_responses
from app.releases import releases

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """A health answer."""

    status: str


class Readiness(Health):
    """A readiness answer: which torch the workers run."""

    #: the torch version a worker reports (`2.15.0+cu132`)
    torch: str
    #: the release whose rules that torch has (`2.15.0`), or None when we hold none for it
    torch_release: str | None


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """Alive: the process answers."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses=problem_responses("worker-start-failed", "worker-timeout"),
)
def readyz(pool: PoolDep) -> Readiness:
    """Ready: a torch worker has imported torch and answers (the first call starts the pool);
    says which torch it runs."""
    pool.ready()
    version = pool.torch_version()
    release = version.split("+")[0]
    return Readiness(
        status="ready", torch=version, torch_release=release if release in releases() else None
    )
