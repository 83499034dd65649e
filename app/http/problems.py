"""RFC 9457 problem responses: the catalogue of every code, and the one seam that maps failures."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from app.archive.errors import CODES as ARCHIVE_CODES
from app.failure import Failure, ProblemCode, problem_code
from schema import Issue, SchemaError

PROBLEM_MEDIA_TYPE = "application/problem+json"
#: app.api.docs adds the Problem schema to the OpenAPI components under this name.
PROBLEM_SCHEMA_REF = "#/components/schemas/Problem"
TYPE_BASE = "https://pt2serde.dev/problems/"


@dataclass(frozen=True)
class ProblemType:
    """A documented problem: HTTP status and a short title."""

    status: int
    title: str


#: Every code the service can answer with. A test keeps it equal to the codes the code raises.
CATALOGUE: dict[ProblemCode, ProblemType] = {}


def register(status: int, titles: dict[ProblemCode, str]) -> None:
    """Add codes with their titles to the catalogue."""
    for code, title in titles.items():
        CATALOGUE[code] = ProblemType(status, title)


register(
    400,
    {
        "bad-request": "The request is malformed",
        "bad-multipart": "The multipart body cannot be read",
        "missing-part": "A required part of the request is missing",
    },
)
register(
    404,
    {
        "not-found": "No such resource",
        "unknown-schema-version": "Unknown schema version",
        "upload-not-found": "No held upload of that digest (never sent, or expired)",
    },
)
register(405, {"method-not-allowed": "Method not allowed on this resource"})
register(
    408,
    {
        "body-timeout": "The request body stopped arriving",
        "header-timeout": "The request head did not arrive in time",
    },
)
register(409, {"unsupported-schema-major": "The document's schema major version is not supported"})
register(
    413,
    {
        "payload-too-large": "The request body is over the size limit",
        "document-too-large": "The document is over the JSON size limit",
        "document-too-many-nodes": "The document has more nodes than the limit",
    },
)
register(413, {"too-many-parts": "The multipart body has more parts than the limit"})
register(415, {"unsupported-media-type": "The request's media type is not accepted here"})
register(431, {"headers-too-large": "The request head has too many or too long header fields"})
register(416, {"range-not-satisfiable": "No requested byte range is inside the content"})
_RESOURCE_LIMITS: set[ProblemCode] = {
    "archive-too-large",
    "archive-too-many-members",
    "archive-member-too-large",
    "archive-json-too-large",
}
for _code, _meaning in ARCHIVE_CODES.items():
    CATALOGUE[_code] = ProblemType(413 if _code in _RESOURCE_LIMITS else 422, _meaning.capitalize())
register(
    422,
    {
        "request-invalid": "A request parameter is invalid",
        "schema-error": "The document or description does not fit the schema",
        "invalid-document": "The document does not match the schema",
        "invalid-description": "The schema description cannot be read",
        "unknown-compatibility-mode": "Unknown compatibility mode",
        "operator-not-in-release": "The workers' torch release lacks an operator the program calls",
        "document-too-deep": "The document nests deeper than the limit",
        "document-string-too-long": "A string in the document is over the length limit",
        "document-number-too-long": "A number in the document has too many digits",
        "unknown-model": "The archive has no model of that name",
        "ambiguous-model": "The archive has several models: name one",
        "unsafe-expression": "A symbolic expression outside the safe grammar",
        "unsafe-guards-code": "Guard code outside the safe grammar",
        "unsafe-treespec": "A pytree spec that would import or build foreign types",
        "unsafe-target": "A node target that torch would resolve to arbitrary Python",
        "unsafe-operator": "An operator that reaches outside the graph (files, raw memory, "
        "native code)",
        "unsafe-format-string": "A print format that reads attributes or items of its arguments",
        "unsafe-pickle": "Pickled members, which are never loaded",
        "unsafe-custom-object": "Custom (script) objects, which are pickles",
        "signature-mismatch": "Graph inputs or outputs do not match the signature",
        "duplicate-value": "A value is defined twice",
        "undefined-value": "A value is used but never defined",
        "graph-cycle": "The graph has a cycle",
        "missing-value-meta": "A defined value has no metadata",
        "unknown-spec-value": "A signature spec names an unknown value",
        "integer-out-of-range": "An integer does not fit in 64 bits",
        "duplicate-tensor-name": "Two tensors share a name",
        "invalid-digest": "A digest is malformed",
        "invalid-tensor-view": "A tensor view does not fit its storage",
        "tensor-symbolic": "A stored tensor has a symbolic size",
        "weights-mismatch": "The weights do not match the document's signature",
        "weights-missing": "No weights were given for a document whose program has some",
        "tensor-data-invalid": "Tensor bytes do not fit the tensor's meta",
        "tensors-duplicate-name": "Two tensors share a name",
        "safetensors-invalid": "The safetensors file cannot be read",
        "safetensors-unsupported-dtype": "A dtype safetensors cannot carry",
        "bridge-unsupported-constant": "A constant torch cannot carry without pickles",
        "bridge-unsupported-tensor": "A tensor kind that cannot be carried as raw bytes",
        "document-invalid": "torch's worker could not read the document",
        "torch-document-invalid": "torch produced a document outside the schema",
        "torch-serialize-failed": "torch could not serialize the program",
        "torch-deserialize-failed": "torch could not build the program",
        "torch-save-failed": "torch could not save the program",
        "worker-job-failed": "torch failed on this program",
        "bad-module-stack": "A node's module stack cannot be read",
        "graph-too-large": "The graph is too large for this view",
        "invalid-depth": "Invalid module depth",
        "invalid-stage-cost": "Invalid stage cost",
        "invalid-stage-count": "Invalid stage count",
        "supported-missing": "Partitions need the supported operators named",
        "module-too-deep": "The module tree is deeper than the limit",
        "unknown-shape": "A weight has a symbolic size with no hint",
    },
)
register(
    503,
    {
        "worker-crashed": "The worker (torch or document) died while running this request",
        "worker-timeout": "The worker (torch or document) ran past its time limit",
        "worker-out-of-memory": "The worker (torch or document) ran out of memory",
        "worker-start-failed": "A worker could not start",
        "worker-pool-closed": "The worker pool is shutting down",
        "torch-unavailable": "No torch worker is available",
        "service-busy": "Too much work in flight and waiting: retry after Retry-After seconds",
        "server-stopping": "The server stopped before this request was complete: retry it",
    },
)
register(
    500,
    {
        "internal-error": "Internal error (a bug: please report it)",
        "worker-bad-job": "A job could not be sent to a worker (a bug)",
    },
)

register(
    404,
    {
        "model-not-found": "No model of that name",
        "version-not-found": "The model has no version of that number",
        "alias-not-found": "The model has no alias of that name",
        "tag-not-found": "The version has no tag of that key",
        "blob-not-found": "No live version refers to that blob",
        "version-deleted": "The version was deleted",
        "node-not-found": "The program has no node at that graph and position",
    },
)
register(
    422,
    {
        "invalid-name": "A model name, alias, tag or reason is malformed",
        "invalid-program": "The program is not valid (semantic validation or torch)",
    },
)
register(
    422,
    {
        "unknown-torch-release": "No rules are shipped for that torch release",
        "release-archive-layout": "That torch release's loader reads an archive layout "
        "(pickled weights) this service does not write",
        "release-missing-operator": "That torch release lacks an operator the program calls",
        "downgrade-refused": "That torch release's schema cannot say what the document says",
    },
)
register(404, {"webhook-not-found": "No webhook subscription of that id"})
register(
    422,
    {
        "invalid-webhook": "A webhook URL or event kind is malformed",
        "webhook-destination-refused": "A webhook URL's host is, or resolves only to, an address "
        "webhooks may not reach (loopback, private, link-local, ...) under the operator's "
        "settings",
        "invalid-search": "A search filter is malformed",
    },
)
register(503, {"registry-unavailable": "The registry's database or blob store cannot be used"})

register(
    401,
    {
        "unauthenticated": "Credentials are missing or not known (send Authorization: Bearer)",
        "token-expired": "The bearer token has expired",
        "token-revoked": "The bearer token was revoked",
    },
)
register(
    403,
    {
        "forbidden": "The caller lacks the permission this needs",
        "cross-origin-refused": "A change sent by another site's page was refused",
        "alias-protected": "The alias is protected: moving or removing it needs manage",
    },
)
register(
    404,
    {
        "token-not-found": "No token of that id",
        "permission-not-found": "The principal has no grant on that model",
    },
)
register(
    409,
    {
        "version-has-aliases": "Aliases name the version: move them or detach them",
        "namespace-unregistered": "The torch workers do not import an operator namespace the "
        "program calls, so torch's check cannot run (PT2SERDE_WORKER_IMPORTS)",
    },
)
register(422, {"quota-exceeded": "The change would go over a quota"})
register(
    429,
    {
        "rate-limited": "Over a per-hour quota: retry after Retry-After seconds",
        "too-many-downloads": "The client has as many downloads open as it may: retry after "
        "one ends",
    },
)


class ProblemIssue(BaseModel):
    """One detail of a problem: a code, a JSON pointer and a message."""

    code: str
    path: str
    message: str


class Problem(BaseModel):
    """The body of every error response (RFC 9457)."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    errors: list[ProblemIssue] = []


class ServiceError(Exception):
    """A failure at the HTTP layer, with a catalogued code."""

    def __init__(self, code: ProblemCode, detail: str, issues: list[Issue] | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.issues = issues or []


def problem(code: ProblemCode, detail: str, issues: list[Issue] | None = None) -> Response:
    """A problem+json response for a catalogued code."""
    kind = CATALOGUE[code]
    body: dict[str, Any] = {
        "type": TYPE_BASE + code,
        "title": kind.title,
        "status": kind.status,
        "detail": detail,
        "code": code,
        "errors": [{"code": i.code, "path": i.path, "message": i.message} for i in issues or []],
    }
    return Response(orjson.dumps(body), status_code=kind.status, media_type=PROBLEM_MEDIA_TYPE)


def problem_responses(*codes: ProblemCode) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries documenting the problems a route can answer with."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        kind = CATALOGUE[code]
        entry = out.setdefault(
            kind.status,
            {
                "description": "",
                "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": PROBLEM_SCHEMA_REF}}},
            },
        )
        entry["description"] = "; ".join(
            filter(None, [entry["description"], f"{code}: {kind.title}"])
        )
    return out


async def _service_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return problem(exc.code, exc.detail, exc.issues)


async def _failure(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, Failure)
    response = problem(exc.code, exc.message, exc.issues)
    # WWW-Authenticate of a 401, Retry-After of a 429
    response.headers.update(getattr(exc, "headers", {}))
    return response


async def _schema_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, SchemaError)
    # the schema package cannot import app's codes, so its codes arrive as plain strings
    return problem(problem_code(exc.code), str(exc), getattr(exc, "issues", None))


async def _request_invalid(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    issues = [
        Issue(
            "request-invalid",
            "/" + "/".join(str(p) for p in err.get("loc", ())),
            str(err.get("msg", "invalid")),
        )
        for err in exc.errors()
    ]
    return problem("request-invalid", "a request parameter is invalid", issues)


_HTTP_CODES: dict[int, ProblemCode] = {
    404: "not-found",
    405: "method-not-allowed",
    413: "payload-too-large",
}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "bad-request")
    response = problem(code, str(exc.detail))
    for key, value in (exc.headers or {}).items():
        response.headers[key] = value
    if exc.status_code == 405:
        # Starlette names only the first route's methods; a path can have several routes.
        response.headers["Allow"] = ", ".join(_allowed_methods(request))
    return response


def _allowed_methods(request: Request) -> list[str]:
    """The documented methods of every route whose path template matches the request's path."""
    table: list[tuple[re.Pattern[str], set[str]]] | None = getattr(
        request.app.state, "method_table", None
    )
    if table is None:
        table = [
            (compile_path(path)[0], {m.upper() for m in item})
            for path, item in request.app.openapi()["paths"].items()
        ]
        request.app.state.method_table = table
    path = request.scope["path"]
    return sorted({m for pattern, methods in table if pattern.match(path) for m in methods})


async def _unexpected(_: Request, exc: Exception) -> Response:
    return problem("internal-error", f"unexpected {type(exc).__name__}")


HANDLERS = {
    ServiceError: _service_error,
    Failure: _failure,
    SchemaError: _schema_error,
    RequestValidationError: _request_invalid,
    StarletteHTTPException: _http_error,
    Exception: _unexpected,
}
