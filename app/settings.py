"""Settings from PT2SERDE_* environment variables, with safe embedded defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

MiB = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    """Every knob of the service; `from_env()` reads PT2SERDE_<FIELD_NAME_UPPER>."""

    host: str = "127.0.0.1"
    port: int = 8000
    #: HTTP server processes (0: one per CPU). Requests are CPU-bound Python, so one process
    #: uses one core; each process starts its own torch workers when it first needs them.
    http_workers: int = 0
    #: torch worker processes (each runs one job at a time).
    workers: int = 2
    #: a torch job is killed past this many seconds: the ceiling of every job's time limit.
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
    max_upload_bytes: int = 512 * MiB
    #: a request body that sends nothing for this many seconds is cut off (408).
    body_idle_timeout_s: float = 30.0
    #: an idle keep-alive connection is closed after this many seconds.
    http_keep_alive_s: int = 5
    #: connections and requests one HTTP process holds at once; past it new ones get 503
    #: (0: no limit). Header-read timeouts need the reverse proxy (docker/nginx.conf).
    http_max_connections: int = 1000
    #: seconds a stopping server waits for requests in flight before it cancels them.
    http_graceful_shutdown_s: int = 30
    #: parts a multipart form may have (a form needs at most a few; each part costs bookkeeping).
    max_form_parts: int = 16
    max_members: int = 10_000
    max_total_uncompressed: int = 2048 * MiB
    max_member_ratio: int = 200
    max_json_bytes: int = 64 * MiB
    max_json_depth: int = 200
    max_nodes: int = 500_000
    max_string_length: int = 1 * MiB
    #: carry use_pickle payloads and custom/opaque objects as opaque bytes instead of refusing.
    allow_opaque_pickles: bool = False
    #: modules a torch worker imports at start to register custom operator namespaces.
    worker_imports: tuple[str, ...] = ()
    data_dir: Path = field(default_factory=lambda: Path("data"))
    database_url: str = ""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Defaults overridden by PT2SERDE_* variables; a malformed value raises ValueError."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(f"PT2SERDE_{f.name.upper()}")
            if raw is None:
                continue
            default = getattr(cls(), f.name)
            if isinstance(default, bool):
                if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(f"PT2SERDE_{f.name.upper()} must be a boolean, got {raw!r}")
                values[f.name] = raw.lower() in ("1", "true", "yes")
            elif isinstance(default, int | float):
                values[f.name] = type(default)(raw)
            elif isinstance(default, tuple):
                values[f.name] = tuple(p for p in raw.split(",") if p)
            elif isinstance(default, Path):
                values[f.name] = Path(raw)
            else:
                values[f.name] = raw
        return cls(**values)  # type: ignore[arg-type]
