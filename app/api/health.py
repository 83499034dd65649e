"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from app.api.deps import PoolDep
from app.api.problems import problem_responses

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """A health answer."""

    status: str


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """Alive: the process answers."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Health,
    responses=problem_responses("worker-start-failed", "worker-timeout"),
)
def readyz(pool: PoolDep) -> Health:
    """Ready: a torch worker has imported torch and answers (the first call starts the pool)."""
    pool.ready()
    return Health(status="ready")
