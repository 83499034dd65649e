"""What the registry answers with: models, versions, aliases, pages, cleanup reports."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from app.programs.findings import Finding
from app.registry.summary import Summary


class VersionDigests(BaseModel):
    """The digests of a version: program, graph and weights (canonical), archive (its bytes)."""

    program: str
    graph: str
    weights: str
    #: sha256 of the stored .pt2 (the blob `GET /v1/blobs/{digest}` serves)
    archive: str


class Verified(BaseModel):
    """torch's own check built the program: its deserializer and every verifier passed."""

    state: Literal["verified"] = "verified"
    #: the torch release of the worker that built it (None: verified at push before the
    #: registry recorded which release did)
    torch: str | None


class Unverified(BaseModel):
    """Checked short of torch (schema, semantics, operators, safety screen and weights, on our
    writer's bytes, nothing unpickled): torch could not build it because its workers do not
    import the custom operator namespaces it calls."""

    state: Literal["unverified"] = "unverified"
    #: the namespaces a torch worker must import (PT2SERDE_WORKER_IMPORTS) to verify it
    namespaces: list[str]


#: How far a version was checked: by torch itself, or short of it (and why).
Verification = Annotated[Verified | Unverified, Field(discriminator="state")]


class VersionInfo(BaseModel):
    """One version of a model: immutable content plus its mutable tags and aliases."""

    model: str
    version: int
    digests: VersionDigests
    archive_size: int
    #: the model's name inside the archive (``model`` for torch.export.save's default)
    archive_model: str
    #: the schema version the document declares
    schema_version: str
    #: the oldest schema version with every feature the document uses
    min_schema_version: str
    #: torch releases whose deserializer reads the document
    readable_by: list[str]
    summary: Summary
    verification: Verification
    created_at: datetime
    deleted_at: datetime | None = None
    deleted_reason: str | None = None
    tags: dict[str, str]
    aliases: list[str]


class ModelInfo(BaseModel):
    """A model name and where its versions stand."""

    name: str
    created_at: datetime
    #: the newest version not deleted
    latest_version: int | None
    #: versions not deleted
    version_count: int
    aliases: dict[str, int]
    #: what the model is, for people (None: not described)
    description: str | None = None


class ModelPage(BaseModel):
    """Models in name order; pass `next` as `after` for the following page."""

    models: list[ModelInfo]
    next: str | None


class VersionPage(BaseModel):
    """Versions in number order; pass `next` as `after` for the following page."""

    versions: list[VersionInfo]
    next: int | None


class AliasInfo(BaseModel):
    """An alias and the version it names."""

    model: str
    alias: str
    version: int
    updated_at: datetime
    #: only a caller with manage on the model moves or removes it
    protected: bool = False


class Pushed(BaseModel):
    """A push's outcome: the version, whether it was created or already there, and what of the
    upload was left out of the served archive."""

    version: VersionInfo
    created: bool
    warnings: list[Finding] = []


class PushedVersion(VersionInfo):
    """A push's answer: the version, and what of the upload its archive leaves out, and why."""

    warnings: list[Finding]


class CleanupReport(BaseModel):
    """What a cleanup removed."""

    #: blobs no live version refers to
    blobs: list[str]
    #: files under blobs/ that are not blobs
    strays: list[str]
    #: staging directories of processes that are gone
    staging: list[str]


class AuditEntry(BaseModel):
    """One row of the audit log."""

    id: int
    at: datetime
    actor: str
    token_id: str | None
    action: str
    model: str | None
    target: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    request_id: str
    client: str


class AuditPage(BaseModel):
    """Audit rows, newest first; pass `next` as `before` for the following (older) page."""

    entries: list[AuditEntry]
    next: int | None


Level = Literal["none", "read", "write", "manage"]


class TokenInfo(BaseModel):
    """A token's public record (never its secret)."""

    id: str
    name: str
    owner: str
    admin: bool
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None


class NewToken(TokenInfo):
    """A token just created: the only answer that carries its secret."""

    secret: str


class Grant(BaseModel):
    """A principal's permission on a model."""

    model: str
    principal: str
    level: Level
    updated_at: datetime


class SearchPage(BaseModel):
    """Matching versions, newest first; pass `next` as `after` for the following page."""

    versions: list[VersionInfo]
    next: int | None


EventKind = Literal[
    "version.created", "version.deleted", "version.verified", "alias.moved", "tag.changed"
]


EVENT_KINDS: tuple[EventKind, ...] = (
    "version.created",
    "version.deleted",
    "version.verified",
    "alias.moved",
    "tag.changed",
)


DeliveryStatus = Literal["pending", "delivered", "failed", "cancelled"]


class Subscription(BaseModel):
    """A webhook subscription: which events of which model (None: every model) go where."""

    id: str
    model: str | None
    events: list[EventKind]
    url: str
    created_at: datetime
    created_by: str | None = None
    #: when deliveries stopped because the creator lost what the subscription needs, and why
    paused_at: datetime | None = None
    paused_reason: str | None = None


class CreatedSubscription(Subscription):
    """A new subscription with its signing secret, which is shown this once."""

    secret: str


class Delivery(BaseModel):
    """Where one event's delivery to one subscription stands."""

    id: int
    event_id: str
    kind: EventKind
    model: str
    status: DeliveryStatus
    attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: datetime
    delivered_at: datetime | None


class DeliveryPage(BaseModel):
    """Deliveries newest first; pass `next` as `before` for the following page."""

    deliveries: list[Delivery]
    next: int | None
