"""Admission control: the document work one HTTP process runs at once is bounded by an estimate
of the memory it needs; past the budget a request waits in a bounded queue, past the queue (or
past its wait) it is refused with 503 `service-busy` and a Retry-After.

Waiting happens on the event loop (a future per waiter), never in a thread: the loop stays free
to answer health checks however many requests wait. The estimate is taken before anything is
parsed: the bytes of the documents (for an archive, the uncompressed sizes its zip directory
declares for its JSON members) times `MEMORY_PER_DOCUMENT_BYTE`.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from app.archive.zipread import json_members_bytes, media_of
from app.failure import Failure, ProblemCode
from app.settings import Limits, MiB, Settings

#: Peak memory of reading and checking a document, per byte of its JSON, measured as the peak RSS
#: growth of a fresh process over the document's size (semantic validation / canonical form):
#: a chain of 10k nodes (5.7 MB) 23x / 29x, of 100k nodes (58 MB) 21x / 28x; tiny HF programs
#: (gpt2, bert, bart, vit, llama; 0.13-0.4 MB) grow by a fixed 15-18 MB, which BASE_NEED covers.
#: The outlier is a document of a million unknown keys (12 MB): 2.6 GB, 220x; the estimate
#: under-counts it and the document worker's address-space limit is what bounds it.
MEMORY_PER_DOCUMENT_BYTE = 32
#: What a request costs besides its documents, however small they are (measured: 15 MB).
BASE_NEED = 16 * MiB


class AdmissionFailure(Failure):
    """A request refused for now (`service-busy`): the process has more work in flight and
    waiting than its budget and queue allow."""

    def __init__(self, code: ProblemCode, message: str, retry_after_s: int) -> None:
        super().__init__(code, message)
        self.retry_after_s = retry_after_s
        #: what the HTTP layer adds to its answer (app.http.problems)
        self.headers = {"Retry-After": str(retry_after_s)}


@dataclass
class _Waiter:
    need: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    granted: bool = False


class Admission:
    """The estimated memory of the work in flight, held under a budget, with a bounded queue."""

    def __init__(self, budget: int, queue: int, wait_s: float, retry_after_s: int) -> None:
        self.budget = budget
        self.queue = queue
        self.wait_s = wait_s
        self.retry_after_s = retry_after_s
        self.in_flight = 0
        # admission is asked for on the event loop and given back from worker threads
        self._lock = threading.Lock()
        self._waiters: collections.deque[_Waiter] = collections.deque()

    @classmethod
    def of(cls, settings: Settings) -> Admission:
        """The admission control `settings` describe (admission_*)."""
        return cls(
            settings.admission_budget_mb * MiB,
            settings.admission_queue,
            settings.admission_wait_s,
            settings.admission_retry_after_s,
        )

    @property
    def waiting(self) -> int:
        """Requests waiting for the budget."""
        with self._lock:
            return len(self._waiters)

    @asynccontextmanager
    async def admit(self, need: int) -> AsyncIterator[None]:
        """Hold `need` bytes of the budget for the block; waits, or raises AdmissionFailure. A need
        over the whole budget is admitted alone (an upload under every limit is still served)."""
        need = max(0, min(need, self.budget))
        await self._acquire(need)
        try:
            yield
        finally:
            self._release(need)

    async def _acquire(self, need: int) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._waiters and self.in_flight + need <= self.budget:
                self.in_flight += need
                return
            if len(self._waiters) >= self.queue:
                raise self._busy(f"{len(self._waiters)} requests are already waiting")
            waiter = _Waiter(need, loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), self.wait_s)
        except BaseException as exc:
            with self._lock:
                if waiter.granted:
                    if not isinstance(exc, TimeoutError):
                        self.in_flight -= need  # granted, but its request is gone
                        self._grant()
                        raise
                    return  # granted just as its wait ran out
                self._waiters.remove(waiter)
                self._grant()  # it may have held back smaller requests behind it
            if isinstance(exc, TimeoutError):
                raise self._busy(f"no room for it within {self.wait_s}s") from None
            raise

    def _release(self, need: int) -> None:
        with self._lock:
            self.in_flight -= need
            self._grant()

    def _grant(self) -> None:
        """Admit waiters in arrival order while the budget allows (the lock is held)."""
        while self._waiters and self.in_flight + self._waiters[0].need <= self.budget:
            waiter = self._waiters.popleft()
            waiter.granted = True
            self.in_flight += waiter.need
            with suppress(RuntimeError):  # its loop closed: the request is gone with it
                waiter.loop.call_soon_threadsafe(_wake, waiter.future)

    def _busy(self, why: str) -> AdmissionFailure:
        message = f"the service is busy ({why}); retry in {self.retry_after_s}s"
        return AdmissionFailure("service-busy", message, self.retry_after_s)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def document_bytes(path: Path, limits: Limits) -> int:
    """The bytes of JSON an upload holds: for an archive, the uncompressed sizes its zip directory
    declares for its .json members (read with the archive limits, nothing decompressed); else,
    or for an archive the reader refuses (as the job will, at once), the file's size."""
    if media_of(path) == "zip":
        with suppress(Failure, OSError):
            return json_members_bytes(path, limits)
    return path.stat().st_size


def documents_bytes(paths: list[Path], limits: Limits) -> int:
    """The bytes of JSON these uploads hold (see `document_bytes`)."""
    return sum(document_bytes(p, limits) for p in paths)


def memory_need(documents: int) -> int:
    """The estimated peak memory of reading and checking `documents` bytes of JSON."""
    return BASE_NEED + MEMORY_PER_DOCUMENT_BYTE * documents
