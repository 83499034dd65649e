"""The root of every coded failure below the HTTP layer (archive, programs, bridge, registry),
the bridge's own (which both sides of the torch door raise), the codes failures carry, and the
project's whole exception tree:

    Exception
    ├── Failure (app.failure)
    │   ├── AdmissionFailure (app.workers.admission)
    │   ├── ArchiveFailure (app.archive.errors)
    │   ├── BridgeFailure (app.failure)
    │   ├── CanonicalFailure (app.programs.canonical)
    │   ├── ClientFailure (app.client)
    │   │   ├── Conflict (app.client)
    │   │   ├── Forbidden (app.client)
    │   │   ├── InvalidProgram (app.client)
    │   │   ├── NotFound (app.client)
    │   │   └── Unavailable (app.client)
    │   ├── DigestFailure (app.programs.digest)
    │   ├── InspectFailure (app.programs.inspect.common)
    │   ├── OperationFailure (app.operations)
    │   ├── PickleRefused (app.archive.pickle_symbols)
    │   ├── RegistryFailure (app.registry.errors)
    │   │   ├── AccessFailure (app.registry.auth)
    │   │   └── RateLimited (app.registry.quotas)
    │   ├── ReleaseFailure (app.programs.for_release)
    │   ├── UnsafeExpression (app.programs.expr)
    │   ├── UnsafeProgram (app.programs.screen)
    │   └── WorkerFailure (app.workers.failures)
    ├── SchemaError (schema.errors)
    │   ├── DescriptionInvalid (schema.errors)
    │   ├── DocumentInvalid (schema.errors)
    │   ├── DowngradeRefused (schema.downgrade)
    │   ├── UnknownMode (schema.compat)
    │   ├── UnknownRelease (app.releases.rules)
    │   ├── UnknownVersion (schema.errors)
    │   └── UnsupportedMajor (schema.errors)
    └── ServiceError (app.http.problems)

`schema` raises only `SchemaError`s (it cannot import app); the HTTP layer's own failures are
`ServiceError`s. Underscored exceptions, signals that never leave their module, are not drawn.
A test keeps this drawing equal to the classes' real hierarchy.
"""

from __future__ import annotations

import re
from typing import Literal, cast, get_args

from schema import Issue

#: Every code a failure can carry to a client: the `code` of a problem+json answer (the
#: catalogue in app/api/problems.py gives each its HTTP status and title) or of a CLI error
#: (app/cli/codes.py lists those that arise on the client's side). A test keeps it equal to
#: the two; typing every parameter that takes a code with it lets mypy reject a misspelt one.
ProblemCode = Literal[
    "alias-not-found",
    "alias-protected",
    "ambiguous-model",
    "archive-ambiguous-end",
    "archive-bad-config",
    "archive-bad-deflate",
    "archive-bad-marker",
    "archive-bad-name",
    "archive-bad-tensor-meta",
    "archive-corrupt",
    "archive-crc-mismatch",
    "archive-duplicate-name",
    "archive-encrypted",
    "archive-header-mismatch",
    "archive-json-too-large",
    "archive-legacy-layout",
    "archive-many-roots",
    "archive-member-too-large",
    "archive-missing-member",
    "archive-native-code",
    "archive-not-pt2",
    "archive-not-zip",
    "archive-overlap",
    "archive-pickled-tensor",
    "archive-ratio-too-high",
    "archive-size-mismatch",
    "archive-special-file",
    "archive-symlink",
    "archive-tensor-size-mismatch",
    "archive-too-large",
    "archive-too-many-members",
    "archive-truncated",
    "archive-unexpected-member",
    "archive-unsupported-compression",
    "archive-write-refused",
    "bad-module-stack",
    "bad-multipart",
    "bad-request",
    "blob-not-found",
    "body-timeout",
    "bridge-unsupported-constant",
    "bridge-unsupported-tensor",
    "cross-origin-refused",
    "document-invalid",
    "document-number-too-long",
    "document-string-too-long",
    "document-too-deep",
    "document-too-large",
    "document-too-many-nodes",
    "downgrade-refused",
    "download-corrupt",
    "duplicate-tensor-name",
    "duplicate-value",
    "forbidden",
    "graph-cycle",
    "graph-too-large",
    "header-timeout",
    "headers-too-large",
    "integer-out-of-range",
    "internal-error",
    "invalid-depth",
    "invalid-description",
    "invalid-digest",
    "invalid-document",
    "invalid-name",
    "invalid-program",
    "invalid-search",
    "invalid-stage-cost",
    "invalid-stage-count",
    "invalid-tensor-view",
    "invalid-webhook",
    "io-error",
    "method-not-allowed",
    "missing-extra",
    "missing-part",
    "missing-value-meta",
    "model-not-found",
    "module-too-deep",
    "namespace-unregistered",
    "node-not-found",
    "not-found",
    "operator-not-in-release",
    "payload-too-large",
    "permission-not-found",
    "quota-exceeded",
    "range-not-satisfiable",
    "rate-limited",
    "registry-unavailable",
    "release-archive-layout",
    "release-missing-operator",
    "request-invalid",
    "safetensors-invalid",
    "safetensors-unsupported-dtype",
    "schema-error",
    "server-stopping",
    "server-unreachable",
    "service-busy",
    "signature-mismatch",
    "supported-missing",
    "tag-not-found",
    "tensor-data-invalid",
    "tensor-symbolic",
    "tensors-duplicate-name",
    "token-expired",
    "token-not-found",
    "token-revoked",
    "too-many-downloads",
    "too-many-parts",
    "torch-deserialize-failed",
    "torch-document-invalid",
    "torch-save-failed",
    "torch-serialize-failed",
    "torch-unavailable",
    "unauthenticated",
    "undefined-value",
    "unknown-compatibility-mode",
    "unknown-model",
    "unknown-schema-version",
    "unknown-shape",
    "unknown-spec-value",
    "unknown-torch-release",
    "unsafe-custom-object",
    "unsafe-expression",
    "unsafe-format-string",
    "unsafe-guards-code",
    "unsafe-operator",
    "unsafe-pickle",
    "unsafe-target",
    "unsafe-treespec",
    "unsupported-media-type",
    "unsupported-schema-major",
    "upload-not-found",
    "version-deleted",
    "version-has-aliases",
    "version-not-found",
    "webhook-destination-refused",
    "webhook-not-found",
    "weights-mismatch",
    "weights-missing",
    "worker-bad-job",
    "worker-crashed",
    "worker-job-failed",
    "worker-out-of-memory",
    "worker-pool-closed",
    "worker-start-failed",
    "worker-timeout",
]
_PROBLEM_CODES: frozenset[str] = frozenset(get_args(ProblemCode))

_SPACES = re.compile(r"\s+")
#: How allocators word a refused allocation (torch's CPU allocator, glibc, CUDA).
_ALLOCATION = re.compile(
    r"can't allocate memory|cannot allocate memory|not enough memory|out of memory", re.IGNORECASE
)


class Failure(Exception):
    """A coded, human-readable failure; `issues` carries per-path details where there are any."""

    def __init__(self, code: ProblemCode, message: str, issues: list[Issue] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.issues = issues or []

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def problem_code(code: str) -> ProblemCode:
    """A code that arrives as a plain string (a finding's, a schema error's) as a `ProblemCode`;
    ValueError when it is none (a bug: the catalogue test keeps every raised code in it)."""
    if code not in _PROBLEM_CODES:
        raise ValueError(f"{code!r} is not a problem code")
    return cast(ProblemCode, code)


class BridgeFailure(Failure):
    """A coded failure of the bridge: conversion, torch-level checks, safetensors, worker pool.

    Here rather than in app.bridge: the torch-free tensor readers (app.tensors) and torch jobs
    (app.jobs) raise it as well as torch's modules, and the torch pool answers with it."""


def one_line(exc: BaseException) -> str:
    """An exception's whole message as one line: no traceback, no newlines, nothing cut."""
    return _SPACES.sub(" ", str(exc)).strip() or type(exc).__name__


def is_allocation_failure(exc: BaseException) -> bool:
    """Whether an exception reports a refused memory allocation (MemoryError or torch's words)."""
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and _ALLOCATION.search(str(exc)) is not None
    )
