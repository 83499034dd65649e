"""The problem catalogue, served: every code the service can answer with, its status and title."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from app.http.problems import CATALOGUE

router = APIRouter(prefix="/v1", tags=["problems"])


class ProblemEntry(BaseModel):
    """One documented problem: its code, HTTP status and title."""

    code: str
    status: int
    title: str


def catalogue_entries() -> list[ProblemEntry]:
    """Every catalogued problem, sorted by code."""
    return [
        ProblemEntry(code=code, status=kind.status, title=kind.title)
        for code, kind in sorted(CATALOGUE.items())
    ]


@router.get("/problems", response_model=list[ProblemEntry])
def problems() -> list[ProblemEntry]:
    """Every problem code the service can answer with (`code` of a problem+json body), with
    its HTTP status and title."""
    return catalogue_entries()
