"""Settings from PT2SERDE_* environment variables (pydantic-settings), with safe embedded defaults.

`Settings` is every knob of the service; `Limits` is the small part of it that the layers below
the service (archive reading, screening, validation, the torch bridge) need, so they never hold
a host, a port or a database URL, and a job pickled to a worker carries only a few integers.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """The bounds on what one input may hold, as the reading and checking layers apply them."""

    max_upload_bytes: int = 512 * MiB
    max_members: int = 10_000
    max_total_uncompressed: int = 2048 * MiB
    max_member_ratio: int = 200
    max_json_bytes: int = 64 * MiB
    max_json_depth: int = 200
    max_nodes: int = 500_000
    max_string_length: int = 1 * MiB
    #: carry use_pickle payloads and custom/opaque objects as opaque bytes instead of refusing.
    allow_opaque_pickles: bool = False


_LIMIT_FIELDS = tuple(f.name for f in fields(Limits))


class Settings(BaseSettings):
    """Every knob of the service; each field is read from PT2SERDE_<FIELD_NAME_UPPER>."""

    model_config = SettingsConfigDict(env_prefix="PT2SERDE_", frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = 8000
    #: HTTP server processes (0: one per CPU). Requests are CPU-bound Python, so one process
    #: uses one core; each process starts its own torch workers when it first needs them.
    http_workers: int = 0
    #: torch worker processes (each runs one job at a time).
    workers: int = 2
    #: a torch job is killed past this many seconds: the ceiling of every job's time limit.
    #: A job's time is its own execution: wall time less the time its thread waited for a core
    #: (app/workers/clock.py), so a loaded host does not kill jobs that are only waiting.
    job_timeout_s: float = 120.0
    #: a job's time limit is this many seconds plus job_timeout_per_mb_s per MiB of what it is
    #: given (document and files), up to job_timeout_s; 0: every job gets job_timeout_s.
    job_timeout_base_s: float = 30.0
    job_timeout_per_mb_s: float = 4.0
    #: address-space limit of a torch worker, in MiB (0: no limit).
    worker_memory_mb: int = 4096
    #: a worker is replaced after this many jobs.
    worker_max_jobs: int = 50
    #: a worker that ran a job and then sat idle this many seconds exits, giving back what the
    #: job made it hold (about 1 GB after a large program); the next job starts one (0: never).
    worker_idle_s: float = 300.0
    #: a torch worker holding more than this many MiB after a job exits (0: never); the next
    #: job that needs its slot starts a fresh one (forked warm, torch already imported).
    worker_recycle_rss_mb: int = 768
    #: document worker processes: torch-free, they parse, check, canonicalize, diff and inspect
    #: uploads over document_inline_bytes (each runs one job at a time).
    document_workers: int = 2
    #: an upload of at most this many bytes is worked on in the API process: a round trip to a
    #: worker costs more than reading it (measured: see app/workers/runner.py).
    document_inline_bytes: int = 256 * 1024
    #: address-space limit of a document worker, in MiB (0: no limit).
    document_worker_memory_mb: int = 4096
    #: the document jobs' time limits, as job_timeout_* are the torch jobs'.
    document_job_timeout_s: float = 120.0
    document_job_timeout_base_s: float = 10.0
    document_job_timeout_per_mb_s: float = 4.0
    document_worker_max_jobs: int = 200
    document_worker_idle_s: float = 300.0
    #: a document worker holding more than this many MiB after a job is replaced at once.
    document_worker_recycle_rss_mb: int = 512
    #: start the document workers with each HTTP process rather than with its first upload
    #: over document_inline_bytes, which would otherwise wait for their imports (1-2 s).
    document_workers_at_start: bool = True
    #: estimated memory (MiB) of the document work one HTTP process admits at once; past it a
    #: request waits (see app/workers/admission.py for the estimate).
    admission_budget_mb: int = 3072
    #: requests one HTTP process lets wait for the budget; past it, 503 service-busy.
    admission_queue: int = 8
    #: seconds a request waits for the budget before it gets 503 service-busy.
    admission_wait_s: float = 30.0
    #: the Retry-After (seconds) of a 503 service-busy.
    admission_retry_after_s: int = 5
    max_upload_bytes: int = Limits.max_upload_bytes
    #: an upload held for later requests (POST /v1/uploads: the web UI's "Try a file" sends a
    #: file once, then names it) is removed this many seconds after its last use
    held_upload_s: float = 600.0
    #: the bytes of held uploads kept at most (the least recently used go first)
    held_uploads_bytes: int = 2048 * MiB
    #: a request body that sends nothing for this many seconds is cut off (408).
    body_idle_timeout_s: float = 30.0
    #: a plain request body of at least this many bytes (with a Content-Length) is spliced from
    #: the socket into its file, never passing through the service; its connection then closes
    #: after the answer (app.http.cycle).
    direct_body_bytes: int = 16 * MiB
    #: a request body not complete this many seconds after its head is cut off (408), however
    #: steadily it trickles (0: no limit); 600 s lets a 512 MiB upload arrive at 1 MiB/s.
    body_timeout_s: float = 600.0
    #: a connection whose request head (request line and headers) is not complete this many
    #: seconds after the connection opened, or after its previous answer, is closed (408).
    http_header_timeout_s: float = 10.0
    #: a request head (request line and header fields) may hold at most this many bytes in
    #: all, this many header fields, and this many bytes in one line; past any of them the
    #: connection gets 431 headers-too-large and is closed, before the app sees the request.
    http_max_head_bytes: int = 64 * 1024
    http_max_header_fields: int = 100
    http_max_header_line_bytes: int = 16 * 1024
    #: a client that takes none of an answer for this many seconds has its connection dropped.
    http_send_stall_s: float = 60.0
    #: stored bytes (archives, documents, blobs) being sent to one client address at once;
    #: past it 429 too-many-downloads (0: no cap). Behind a proxy that hides client addresses,
    #: every client shares the proxy's.
    http_max_downloads_per_client: int = 16
    #: an idle keep-alive connection is closed after this many seconds.
    http_keep_alive_s: int = 5
    #: connections and requests one HTTP process holds at once; past it new ones get 503
    #: (0: no limit).
    http_max_connections: int = 1000
    #: seconds a stopping server waits for requests in flight before it cancels them.
    http_graceful_shutdown_s: int = 30
    #: seconds uvicorn's supervisor waits for an HTTP process to answer its ping before it kills
    #: it; uvicorn's 5 s kills processes still importing the service on a loaded host, forever.
    http_healthcheck_timeout_s: int = 60
    #: parts a multipart form may have (a form needs at most a few; each part costs bookkeeping).
    max_form_parts: int = 16
    max_members: int = Limits.max_members
    max_total_uncompressed: int = Limits.max_total_uncompressed
    max_member_ratio: int = Limits.max_member_ratio
    max_json_bytes: int = Limits.max_json_bytes
    max_json_depth: int = Limits.max_json_depth
    max_nodes: int = Limits.max_nodes
    max_string_length: int = Limits.max_string_length
    allow_opaque_pickles: bool = Limits.allow_opaque_pickles
    #: modules a torch worker imports at start to register custom operator namespaces
    #: (comma-separated in the environment).
    worker_imports: Annotated[tuple[str, ...], NoDecode] = ()
    data_dir: Path = Path("data")
    database_url: str = ""
    #: where blobs live: "" (<data_dir>/blobs), file:///path or s3://bucket/prefix (endpoint and
    #: credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION).
    blob_url: str = ""
    #: part size (MiB) of multipart uploads to S3; smaller objects go in one PUT.
    blob_part_mb: int = 16
    #: store tensor payloads encoded (byte planes and zstd, deltas against the parent version's
    #: tensors) where that saves bytes; off: every object is stored as its raw bytes.
    store_encode: bool = True
    #: the least fraction of a payload's bytes its encoded form must save to be stored.
    store_min_saving: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.05
    #: the most objects a read of one tensor opens: a delta's chain (each delta, then the full
    #: object at its end) stays this short (1: no deltas).
    store_delta_chain: Annotated[int, Field(ge=1)] = 4
    #: zstd's level for stored payloads (1 compresses byte planes about as well as 3, faster).
    store_zstd_level: Annotated[int, Field(ge=-7, le=22)] = 1
    #: seconds a soft-deleted version keeps its objects before gc may collect them.
    gc_deleted_grace_s: float = 7 * 24 * 3600.0
    #: seconds an object a push claimed stays safe from gc while no version refers to it yet
    #: (correctness does not rest on it: a push re-stores what gc took; it spares the work).
    gc_claim_grace_s: float = 3600.0
    #: seconds between gc runs in each replica (0: only `pt2serde registry gc`).
    gc_interval_s: float = 0.0
    #: seconds the webhook dispatcher sleeps when the outbox has nothing due.
    webhook_poll_s: float = 1.0
    #: seconds a receiver has to answer one delivery.
    webhook_timeout_s: float = 10.0
    #: seconds a claimed delivery stays with its dispatcher; past it (the replica died) another
    #: one claims it again. Longer than webhook_timeout_s.
    webhook_lease_s: float = 60.0
    #: attempts at one delivery before it is recorded as failed.
    webhook_max_attempts: int = 10
    #: seconds before the first retry; each later one waits twice as long, up to the maximum.
    webhook_backoff_s: float = 2.0
    webhook_backoff_max_s: float = 3600.0
    #: deliveries one dispatcher claims and sends at once.
    webhook_batch: int = 16
    #: let webhooks post to loopback and private (RFC 1918, unique-local) addresses, for
    #: receivers inside the operator's network; off, only globally routable ones are reached.
    webhook_allow_private: bool = False
    #: networks (CIDR, comma-separated in the environment) webhooks may reach whatever they are,
    #: e.g. one internal subnet; link-local addresses such as cloud metadata need listing here.
    webhook_allowed_networks: Annotated[tuple[str, ...], NoDecode] = ()

    #: the bootstrap admin's bearer token (32 characters or more): once a way to authenticate
    #: is configured, every registry request needs credentials.
    admin_token: SecretStr = SecretStr("")
    #: a file holding the bootstrap admin token instead (a secret mounted as a file).
    admin_token_file: Path | None = None
    #: a header a trusted reverse proxy sets to the signed-in user's name ("": off). Set it only
    #: when every request comes through that proxy and the proxy drops the header from clients.
    identity_header: str = ""
    #: users the proxy names who are admins (comma-separated in the environment).
    admin_users: Annotated[tuple[str, ...], NoDecode] = ()
    #: what an authenticated caller may do with a model no grant names.
    default_permission: Literal["none", "read", "write", "manage"] = "read"
    #: the organization's policy for a push torch's check cannot build only because the torch
    #: workers do not import a custom operator namespace it calls (PT2SERDE_WORKER_IMPORTS):
    #: store it as unverified, checked short of torch (app/registry/verification.py), or refuse
    #: it (422 invalid-program, as any program torch's check refuses).
    allow_unverified: bool = False
    #: who may call the stateless operations (validate, canonicalize, diff, ...) once
    #: authentication is configured: anyone ("open") or any valid token ("token").
    stateless_access: Literal["open", "token"] = "open"
    #: quotas (0: none), per model and per token; pushes per hour answer 429 with Retry-After.
    quota_versions_per_hour: int = 600
    quota_token_versions_per_hour: int = 1200
    quota_tags_per_version: int = 100
    quota_aliases_per_model: int = 100
    quota_tag_value_bytes: int = 4096
    #: bytes of live versions' archives one model, or one token's pushes, may hold.
    quota_model_bytes: int = 64 * 1024 * MiB
    quota_token_bytes: int = 256 * 1024 * MiB

    @field_validator("worker_imports", "admin_users", "webhook_allowed_networks", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        return tuple(p for p in value.split(",") if p) if isinstance(value, str) else value

    @field_validator("webhook_allowed_networks")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(str(ipaddress.ip_network(n.strip(), strict=False)) for n in value)

    @property
    def limits(self) -> Limits:
        """The limits the lower layers apply, as these settings set them."""
        return Limits(**{name: getattr(self, name) for name in _LIMIT_FIELDS})

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Defaults overridden by PT2SERDE_* variables (those of `environ`, when given, over the
        process's); a malformed value raises a one-line ValueError naming the variable."""
        prefix = cls.model_config.get("env_prefix", "")
        given: dict[str, Any] = {
            name: value
            for key, value in (environ or {}).items()
            if key.startswith(prefix)
            and (name := key.removeprefix(prefix).lower()) in cls.model_fields
        }
        try:
            return cls(**given)
        except ValidationError as exc:
            raise ValueError(_one_line(exc)) from None


def _one_line(exc: ValidationError) -> str:
    """A settings error as one line: each bad variable, what is wrong and the value given."""
    return "; ".join(
        f"PT2SERDE_{str(e['loc'][0]).upper()}: {e['msg']}, got {e['input']!r}"
        for e in exc.errors(include_url=False)
    )
