"""The document pool and its runner: torch-free work on uploaded programs, in this process for a
small input and in a spawned worker for a large one.

Reading a document is where a hostile upload costs memory and time (a 46 MB archive with 100k
nodes took 1.9 GB to parse), so above `document_inline_bytes` it happens in a worker with its own
address-space limit and time limit, never in the API process. The jobs (app.jobs) are given
paths and return only small values. The workers are spawned fresh interpreters that import no
torch (the forkserver belongs to the torch pool and preloads torch); a spawned worker imports the
parent's main module again, as multiprocessing does (`pt2serde serve`, uvicorn and
`python -m app.cli` import no torch; tests/workers checks a worker's modules).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import suppress
from typing import TypeVar, TypeVarTuple, cast

from app.failure import Failure
from app.settings import Settings
from app.workers.pool import LazyPool, PoolSpec

R = TypeVar("R")
Ts = TypeVarTuple("Ts")

#: Imported by each document worker as it starts, so that its first job starts warm: named as
#: data (the module that holds the document jobs), never imported by the workers package itself.
PRELOAD: tuple[str, ...] = ("app.jobs.documents",)


def document_spec(settings: Settings) -> PoolSpec:
    """The document pool's shape, from the settings (document_*)."""
    return PoolSpec(
        kind="document",
        workers=settings.document_workers,
        preload=PRELOAD,
        imports=(),
        start_method="spawn",
        memory_mb=settings.document_worker_memory_mb,
        job_timeout_s=settings.document_job_timeout_s,
        job_timeout_base_s=settings.document_job_timeout_base_s,
        job_timeout_per_mb_s=settings.document_job_timeout_per_mb_s,
        max_jobs=settings.document_worker_max_jobs,
        idle_s=settings.document_worker_idle_s,
        recycle_rss_mb=settings.document_worker_recycle_rss_mb,
        # a spawned worker imports for a second or more: not while a request waits
        refill_at_once=True,
        setting_prefix="document_",
    )


class DocumentRunner(LazyPool):
    """Runs document jobs: in this process for an input of at most `document_inline_bytes`, in
    the document pool (started by its first job) otherwise.

    A round trip to a warm worker costs 0.3-0.6 ms of CPU beyond the job (a 107-node document's
    semantic validation takes 6-7 ms either way), and more in wake-ups on a busy machine: so
    small documents stay here, where the 256 KiB default costs at most 24 MiB by the admission
    estimate, well inside the API process's 64 MiB budget. But one process runs one thread of
    Python at a time: a second small job while one runs here goes to a worker that is idle at
    that moment, if any (an HTTP process that got most of the connections then uses the other
    cores too), and otherwise runs here as well, never waiting behind a large job.
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__(document_spec(settings))
        self.inline_bytes = settings.document_inline_bytes
        self.at_start = settings.document_workers_at_start
        #: held by the small job running in this process, if any
        self._here = threading.Lock()

    def start(self) -> None:
        """Start the workers now if the settings say so (document_workers_at_start): they import
        while the process waits for work, not while its first large upload waits for them."""
        if self.at_start:
            with suppress(Failure):  # the first job that needs a worker tries again, and says why
                self.get()

    def run(self, size: int, job: Callable[[*Ts], R], *args: *Ts) -> R:
        """`job(*args)` for documents of `size` bytes in all, here or in a worker (whose time
        limit grows with `size`: an archive's file size says little about its documents')."""
        timeout = self.spec.time_limit(size)
        if size > self.inline_bytes:
            return self.submit(job, *args, timeout_s=timeout)
        if self._here.acquire(blocking=False):
            try:
                return job(*args)
            finally:
                self._here.release()
        sent, result = self.submit_if_idle(job, *args, timeout_s=timeout)
        # sent: the job's own result, which may be None
        return cast(R, result) if sent else job(*args)
