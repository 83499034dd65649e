"""Schema endpoints: the current version, the known versions, descriptions and JSON Schemas."""

from __future__ import annotations

from importlib.metadata import version as package_version
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel

import schema
from app.api.deps import UploadDep
from app.api.docs import request_body
from app.http.problems import ServiceError, problem_responses
from schema.diff import DescriptionLike

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


Mode = Literal[
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
]


class ChangeOut(BaseModel):
    """One difference between two schema versions, with who it breaks and the bump it needs."""

    rule: str
    path: str
    old: Any
    new: Any
    #: old and new as the changelog writes them (a field's type with its default, a list joined)
    old_text: str
    new_text: str
    breaks_forward: bool
    breaks_backward: bool
    bump: str
    message: str


class VerdictOut(BaseModel):
    """A compatibility verdict in one mode, and whether the version numbers follow the rules."""

    ok: bool
    mode: str
    violations: list[ChangeOut]
    required_bump: str
    actual_bump: str
    numbers_follow_rules: bool
    message: str | None
    #: the (old, new) version pairs diffed, as ["8.7", "8.8"]
    checked: list[list[str]]


class SchemaDiffOut(BaseModel):
    """Every change from one schema version to another (and a verdict when a mode is asked)."""

    old_version: str
    new_version: str
    required_bump: str
    changes: list[ChangeOut]
    verdict: VerdictOut | None = None


def _change(c: schema.Change) -> ChangeOut:
    return ChangeOut(
        rule=c.rule,
        path=c.path,
        old=c.old,
        new=c.new,
        old_text=c.old_text,
        new_text=c.new_text,
        breaks_forward=c.breaks_forward,
        breaks_backward=c.breaks_backward,
        bump=c.bump,
        message=c.message,
    )


def schema_diff(
    old: DescriptionLike,
    new: DescriptionLike,
    mode: Mode | None,
    fmt: Literal["json", "markdown"],
) -> Response:
    """The diff (and verdict) as JSON, or the changelog as markdown."""
    result = schema.diff(old, new)
    if fmt == "markdown":
        return Response(schema.changelog(result), media_type="text/markdown")
    out = SchemaDiffOut(
        old_version=result.old_version,
        new_version=result.new_version,
        required_bump=result.required_bump,
        changes=[_change(c) for c in result.changes],
    )
    if mode is not None:
        v = schema.compatibility(old, new, mode)
        out.verdict = VerdictOut(
            ok=v.ok,
            mode=str(v.mode),
            violations=[_change(c) for c in v.violations],
            required_bump=v.required_bump,
            actual_bump=v.actual_bump,
            numbers_follow_rules=v.numbers_follow_rules,
            message=v.message,
            checked=[list(pair) for pair in v.checked],
        )
    return Response(out.model_dump_json(), media_type="application/json")


_DIFF_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "model": SchemaDiffOut,
        "content": {"text/markdown": {"schema": {"type": "string"}}},
        "description": "The changes (JSON), or a markdown changelog with format=markdown",
    }
}


@router.get(
    "/diff",
    response_class=Response,
    responses={**_DIFF_DOC, **problem_responses("unknown-schema-version", "request-invalid")},
)
def diff_versions(
    from_: Annotated[str, Query(alias="from")],
    to: str,
    mode: Mode | None = None,
    format: Literal["json", "markdown"] = "json",
) -> Response:
    """What changed between two known 8.x versions, and whether `mode` holds between them."""
    return schema_diff(from_, to, mode, format)


@router.post(
    "/diff",
    response_class=Response,
    openapi_extra=request_body("old", "new", json=None, zip_=False, required=2),
    responses={
        **_DIFF_DOC,
        **problem_responses(
            "invalid-description",
            "missing-part",
            "bad-multipart",
            "payload-too-large",
            "unsupported-media-type",
        ),
    },
)
def diff_descriptions(
    upload: UploadDep,
    mode: Mode | None = None,
    format: Literal["json", "markdown"] = "json",
) -> Response:
    """What changed between two uploaded descriptions (torch schema.yaml files, YAML or JSON)."""
    old, new = upload.need("old"), upload.need("new")
    for part in (old, new):
        if part.media not in ("yaml", "json"):
            raise ServiceError("unsupported-media-type", f"{part.name}: send a schema.yaml")
    return schema_diff(
        schema.load_description(old.read()), schema.load_description(new.read()), mode, format
    )
