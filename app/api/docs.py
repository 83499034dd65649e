"""The OpenAPI document: FastAPI's, plus the wire schema and the Problem body as components."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

import schema
from app.failure import ProblemCode
from app.http.problems import PROBLEM_SCHEMA_REF, Problem

COMPONENTS = "#/components/schemas/"
ZIP = "application/zip"
#: JSON request bodies: any object here, the full contract in the ExportedProgram component (a
#: recursive schema that example generators such as schemathesis's cannot walk reliably).
DOCUMENT_BODY = {
    "type": "object",
    "description": f"An exported program document (schema 8.x): {COMPONENTS}ExportedProgram",
}


#: The problems of reading an upload at all (app.http.uploads; a held one, ?upload=, may be gone).
UPLOAD_PROBLEMS: tuple[ProblemCode, ...] = (
    "upload-not-found",
    "bad-request",
    "bad-multipart",
    "too-many-parts",
    "body-timeout",
    "missing-part",
    "payload-too-large",
    "unsupported-media-type",
    "request-invalid",
)
#: ... and of reading a program from it (app.operations: open, bound, parse, screen).
READ_PROBLEMS: tuple[ProblemCode, ...] = (
    *UPLOAD_PROBLEMS,
    "archive-corrupt",
    "invalid-document",
    "unsupported-schema-major",
    "unsafe-pickle",
)
#: A worker job's failures (app.workers.pool).
TORCH_PROBLEMS: tuple[ProblemCode, ...] = (
    "worker-crashed",
    "worker-timeout",
    "worker-out-of-memory",
)


def request_body(
    *fields: str,
    json: dict[str, Any] | None = DOCUMENT_BODY,
    zip_: bool = True,
    required: int = 1,
) -> dict[str, Any]:
    """OpenAPI requestBody of an upload: raw zip and/or a JSON body of the given schema, or a
    form with these file fields (the first `required` of them needed)."""
    binary = {"type": "string", "format": "binary"}
    content: dict[str, Any] = {}
    if zip_:
        content[ZIP] = {"schema": binary}
    if json is not None:
        content["application/json"] = {"schema": json}
    content["multipart/form-data"] = {
        "schema": {
            "type": "object",
            "properties": dict.fromkeys(fields, binary),
            "required": list(fields[:required]),
        }
    }
    return {"requestBody": {"required": True, "content": content}}


def extra_components() -> dict[str, Any]:
    """The 8.20 document types and the problem body, referenced from route docs."""
    wire = schema.json_schema(schema.CURRENT, refs=COMPONENTS)["$defs"]
    problem = Problem.model_json_schema(ref_template=COMPONENTS + "{model}")
    nested = problem.pop("$defs", {})
    return {**wire, **nested, PROBLEM_SCHEMA_REF.removeprefix(COMPONENTS): problem}


def _credentials_optional(spec: dict[str, Any]) -> None:
    """Every route takes credentials without demanding them (who may do what follows the
    settings: an open loopback service, or an organization default permission), and answers
    401 itself when a token is needed; so each security requirement also allows none."""
    for operations in spec.get("paths", {}).values():
        for operation in operations.values():
            security = operation.get("security") if isinstance(operation, dict) else None
            if security and {} not in security:
                security.append({})


def install(app: FastAPI) -> None:
    """Make `app.openapi()` include the extra components (computed once)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                routes=app.routes,
            )
            components = spec.setdefault("components", {}).setdefault("schemas", {})
            extra = extra_components()
            clash = sorted(set(components) & set(extra))
            if clash:
                raise RuntimeError(f"OpenAPI component names used twice: {clash}")
            components.update(extra)
            _credentials_optional(spec)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
