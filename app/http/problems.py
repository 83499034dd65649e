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
from app.failure import Failure
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
CATALOGUE: dict[str, ProblemType] = {}


def register(status: int, **codes: str) -> None:
    """Add codes (keyword names use _ for -) with their titles to the catalogue."""
    for name, title in codes.items():
        CATALOGUE[name.replace("_", "-")] = ProblemType(status, title)


register(
    400,
    bad_request="The request is malformed",
    bad_multipart="The multipart body cannot be read",
    missing_part="A required part of the request is missing",
)
register(404, not_found="No such resource", unknown_schema_version="Unknown schema version")
register(405, method_not_allowed="Method not allowed on this resource")
register(
    408,
    body_timeout="The request body stopped arriving",
    header_timeout="The request head did not arrive in time",
)
register(409, unsupported_schema_major="The document's schema major version is not supported")
register(
    413,
    payload_too_large="The request body is over the size limit",
    document_too_large="The document is over the JSON size limit",
    document_too_many_nodes="The document has more nodes than the limit",
)
register(413, too_many_parts="The multipart body has more parts than the limit")
register(415, unsupported_media_type="The request's media type is not accepted here")
register(431, headers_too_large="The request head has too many or too long header fields")
register(416, range_not_satisfiable="No requested byte range is inside the content")
_RESOURCE_LIMITS = {
    "archive-too-large",
    "archive-too-many-members",
    "archive-member-too-large",
    "archive-json-too-large",
}
for _code, _meaning in ARCHIVE_CODES.items():
    CATALOGUE[_code] = ProblemType(413 if _code in _RESOURCE_LIMITS else 422, _meaning.capitalize())
register(
    422,
    request_invalid="A request parameter is invalid",
    schema_error="The document or description does not fit the schema",
    invalid_document="The document does not match the schema",
    invalid_description="The schema description cannot be read",
    unknown_compatibility_mode="Unknown compatibility mode",
    operator_not_in_release="The workers' torch release lacks an operator the program calls",
    document_too_deep="The document nests deeper than the limit",
    document_string_too_long="A string in the document is over the length limit",
    document_number_too_long="A number in the document has too many digits",
    unknown_model="The archive has no model of that name",
    ambiguous_model="The archive has several models: name one",
    unsafe_expression="A symbolic expression outside the safe grammar",
    unsafe_guards_code="Guard code outside the safe grammar",
    unsafe_treespec="A pytree spec that would import or build foreign types",
    unsafe_target="A node target that torch would resolve to arbitrary Python",
    unsafe_operator="An operator that reaches outside the graph (files, raw memory, native code)",
    unsafe_format_string="A print format that reads attributes or items of its arguments",
    unsafe_pickle="Pickled members, which are never loaded",
    unsafe_custom_object="Custom (script) objects, which are pickles",
    signature_mismatch="Graph inputs or outputs do not match the signature",
    duplicate_value="A value is defined twice",
    undefined_value="A value is used but never defined",
    graph_cycle="The graph has a cycle",
    missing_value_meta="A defined value has no metadata",
    unknown_spec_value="A signature spec names an unknown value",
    integer_out_of_range="An integer does not fit in 64 bits",
    duplicate_tensor_name="Two tensors share a name",
    invalid_digest="A digest is malformed",
    invalid_tensor_view="A tensor view does not fit its storage",
    tensor_symbolic="A stored tensor has a symbolic size",
    weights_mismatch="The weights do not match the document's signature",
    weights_missing="No weights were given for a document whose program has some",
    tensor_data_invalid="Tensor bytes do not fit the tensor's meta",
    tensors_duplicate_name="Two tensors share a name",
    safetensors_invalid="The safetensors file cannot be read",
    safetensors_unsupported_dtype="A dtype safetensors cannot carry",
    bridge_unsupported_constant="A constant torch cannot carry without pickles",
    bridge_unsupported_tensor="A tensor kind that cannot be carried as raw bytes",
    document_invalid="torch's worker could not read the document",
    torch_document_invalid="torch produced a document outside the schema",
    torch_serialize_failed="torch could not serialize the program",
    torch_deserialize_failed="torch could not build the program",
    torch_save_failed="torch could not save the program",
    worker_job_failed="torch failed on this program",
    bad_module_stack="A node's module stack cannot be read",
    graph_too_large="The graph is too large for this view",
    invalid_depth="Invalid module depth",
    invalid_stage_cost="Invalid stage cost",
    invalid_stage_count="Invalid stage count",
    supported_missing="Partitions need the supported operators named",
    module_too_deep="The module tree is deeper than the limit",
    unknown_shape="A weight has a symbolic size with no hint",
)
register(
    503,
    worker_crashed="The worker (torch or document) died while running this request",
    worker_timeout="The worker (torch or document) ran past its time limit",
    worker_out_of_memory="The worker (torch or document) ran out of memory",
    worker_start_failed="A worker could not start",
    worker_pool_closed="The worker pool is shutting down",
    torch_unavailable="No torch worker is available",
    service_busy="Too much work in flight and waiting: retry after Retry-After seconds",
    server_stopping="The server stopped before this request was complete: retry it",
)
register(
    500,
    internal_error="Internal error (a bug: please report it)",
    worker_bad_job="A job could not be sent to a worker (a bug)",
)

register(
    404,
    model_not_found="No model of that name",
    version_not_found="The model has no version of that number",
    alias_not_found="The model has no alias of that name",
    tag_not_found="The version has no tag of that key",
    blob_not_found="No live version refers to that blob",
    version_deleted="The version was deleted",
)
register(
    422,
    invalid_name="A model name, alias, tag or reason is malformed",
    invalid_program="The program is not valid (semantic validation or torch)",
)
register(
    422,
    unknown_torch_release="No rules are shipped for that torch release",
    release_archive_layout="That torch release's loader reads an archive layout (pickled weights) "
    "this service does not write",
    release_missing_operator="That torch release lacks an operator the program calls",
    downgrade_refused="That torch release's schema cannot say what the document says",
)
register(404, webhook_not_found="No webhook subscription of that id")
register(
    422,
    invalid_webhook="A webhook URL or event kind is malformed",
    webhook_destination_refused="A webhook URL's host is, or resolves only to, an address webhooks "
    "may not reach (loopback, private, link-local, ...) under the operator's settings",
    invalid_search="A search filter is malformed",
)
register(
    503,
    registry_unavailable="The registry's database or blob store cannot be used",
)

register(
    401,
    unauthenticated="Credentials are missing or not known (send Authorization: Bearer)",
    token_expired="The bearer token has expired",
    token_revoked="The bearer token was revoked",
)
register(
    403,
    forbidden="The caller lacks the permission this needs",
    cross_origin_refused="A change sent by another site's page was refused",
    alias_protected="The alias is protected: moving or removing it needs manage",
)
register(
    404,
    token_not_found="No token of that id",
    permission_not_found="The principal has no grant on that model",
)
register(409, version_has_aliases="Aliases name the version: move them or detach them")
register(422, quota_exceeded="The change would go over a quota")
register(
    429,
    rate_limited="Over a per-hour quota: retry after Retry-After seconds",
    too_many_downloads="The client has as many downloads open as it may: retry after one ends",
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

    def __init__(self, code: str, detail: str, issues: list[Issue] | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.issues = issues or []


def problem(code: str, detail: str, issues: list[Issue] | None = None) -> Response:
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


def problem_responses(*codes: str) -> dict[int | str, dict[str, Any]]:
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
    return problem(exc.code, str(exc), getattr(exc, "issues", None))


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


_HTTP_CODES = {404: "not-found", 405: "method-not-allowed", 413: "payload-too-large"}


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
