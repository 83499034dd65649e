"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from app.api.problems import ServiceError, problem_responses

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """A health answer."""

    status: str


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """Alive: the process answers."""
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses=problem_responses("not-ready"))
def readyz(request: Request) -> Health:
    """Ready: a torch worker has started and imported torch (starting one if none has)."""
    pool = request.app.state.pool
    if not pool.ready(start=True):
        raise ServiceError("not-ready", "torch workers are starting")
    return Health(status="ready")
