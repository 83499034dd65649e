"""Schema endpoints: the current version, the known versions, descriptions and JSON Schemas."""

from __future__ import annotations

from importlib.metadata import version as package_version
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel

import schema
from app.api.problems import problem_responses

router = APIRouter(prefix="/v1/schema", tags=["schema"])


class CurrentSchema(BaseModel):
    """The schema version the service reads and writes, and the torch releases that match it."""

    version: str
    torch_releases: list[str]
    torch_installed: str


class SchemaVersionInfo(BaseModel):
    """A known schema version with the torch releases that write it."""

    version: str
    torch_releases: list[str]
    describable: bool


@router.get("", response_model=CurrentSchema)
def current() -> CurrentSchema:
    """The current schema version and its torch releases."""
    return CurrentSchema(
        version=schema.format_version(schema.CURRENT),
        torch_releases=list(schema.RELEASES[schema.CURRENT]),
        torch_installed=package_version("torch"),
    )


@router.get("/versions", response_model=list[SchemaVersionInfo])
def versions() -> list[SchemaVersionInfo]:
    """Every known schema version, oldest first."""
    return [
        SchemaVersionInfo(
            version=v.label, torch_releases=list(v.torch_releases), describable=v.describable
        )
        for v in schema.versions()
    ]


@router.get(
    "/versions/{version}",
    response_model=dict[str, Any],
    responses=problem_responses("unknown-schema-version", "request-invalid"),
)
def describe(
    version: str, format: Literal["json-schema", "description"] = "json-schema"
) -> dict[str, Any]:
    """The JSON Schema (default) or the description of a known 8.x version."""
    if format == "description":
        return schema.describe(version)
    return schema.json_schema(version)
