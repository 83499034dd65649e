"""The torch worker pool: the one pool design with workers that preload torch (named here, imported
only by the workers and their forkserver; this module imports no torch). Its jobs live in
app.jobs.torch, which its workers import when they unpickle the first one.

torch's export load and save are not thread-safe, and a hostile document can crash, hang or
bloat the process that deserializes it; so torch runs only in these workers. They are forked
from a forkserver that preloads torch (not from the threaded server), so they start warm.
"""

from __future__ import annotations

from app.failure import BridgeFailure
from app.settings import Settings
from app.workers.pool import STARTUP_TIMEOUT_S, PoolSpec, WorkerPool

#: What a worker imports before its first job; the forkserver preloads it so forks start warm
#: (app.workers.forkserver last: its exit handler must run before the others').
PRELOAD: tuple[str, ...] = (
    "torch",
    "app.bridge.exported",
    "app.bridge.checks",
    "app.workers.forkserver",
)


def torch_spec(settings: Settings, start_method: str = "forkserver") -> PoolSpec:
    """The torch pool's shape, from the settings (workers, worker_*, job_timeout_*)."""
    return PoolSpec(
        kind="torch",
        workers=settings.workers,
        preload=PRELOAD,
        imports=settings.worker_imports,
        start_method=start_method,
        memory_mb=settings.worker_memory_mb,
        job_timeout_s=settings.job_timeout_s,
        job_timeout_base_s=settings.job_timeout_base_s,
        job_timeout_per_mb_s=settings.job_timeout_per_mb_s,
        max_jobs=settings.worker_max_jobs,
        idle_s=settings.worker_idle_s,
        recycle_rss_mb=settings.worker_recycle_rss_mb,
        # a fork of the warm forkserver starts in about a second, while an idle spare holds as
        # much resident memory as torch itself: workers start and refill as jobs need them
        refill_at_once=False,
        start_all=False,
        failure=BridgeFailure,
    )


class TorchPool(WorkerPool):
    """`settings.workers` torch processes; `submit` blocks until a worker has run the job."""

    def __init__(
        self,
        settings: Settings,
        *,
        start_method: str = "forkserver",
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ) -> None:
        super().__init__(torch_spec(settings, start_method), startup_timeout_s=startup_timeout_s)
