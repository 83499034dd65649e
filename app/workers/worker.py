"""Inside a worker process: imports, limits, then one job per message until told to stop.

A worker must never outlive the process that runs its pool, nor run a job past its time limit,
whether or not that process is still there to kill it: so the worker polices itself (a watch
thread, RLIMIT_CPU, and where its parent is single-threaded, the kernel's parent-death signal).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import resource
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

from app.failure import Failure, is_allocation_failure, one_line
from app.workers.clock import JobClock
from app.workers.lifeline import signal_on_parent_death
from schema import SchemaError

MiB = 1024 * 1024
#: A worker ends itself this long after its job's time limit: the pool normally kills it first
#: (and says worker-timeout), but the worker must not outlive a pool that died.
SELF_KILL_GRACE_S = 5.0
#: How often a worker looks at its parent and its job's deadline.
WATCH_INTERVAL_S = 0.5


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker needs to know at start (pickled to it)."""

    #: address-space limit in MiB (0: none)
    memory_mb: int
    #: the setting that limit comes from, to name in a refusal
    memory_setting: str
    #: modules imported before the first job (and before the memory limit)
    imports: tuple[str, ...]
    #: ask the kernel for SIGKILL when the parent ends: only sound when the parent is a
    #: single-threaded forkserver (the signal follows the forking thread, not the process)
    parent_death_signal: bool


def worker_main(conn: Connection, config: WorkerConfig) -> None:
    """A worker's life: imports, memory limit, then one job per message until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if config.parent_death_signal:
        _die_with_parent()
    watch = _Watch(conn)
    try:
        for name in config.imports:
            importlib.import_module(name)
        if config.memory_mb > 0:
            _limit_memory(config.memory_mb, config.memory_setting)
    except BaseException as exc:
        conn.send(("failed", f"{type(exc).__name__}: {one_line(exc)}"))
        return
    conn.send(("ready",))
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        reply = _run(data, watch)
        if reply is None:
            return
        try:
            conn.send(reply)
        except Exception as exc:
            conn.send(("error", type(exc).__name__, f"the result cannot be sent: {one_line(exc)}"))
        if reply[0] == "oom":
            # A refused allocation can leave the allocator's (or torch's) state half-done.
            return


def _die_with_parent() -> None:
    if not signal_on_parent_death(os.getppid(), signal.SIGKILL):
        os._exit(1)  # the parent ended before the signal was armed


class _Watch:
    """A thread that ends the worker, so that it never outlives a pool that is gone: when the
    pool's end of the pipe closes during a job (the pool's process died), when its parent dies
    (the API process, or the forkserver), or when a job runs past its deadline; the kernel's
    RLIMIT_CPU backs it up for a job that holds the GIL.

    A forkserver cannot notice the pool's death itself: every worker holds the write end of
    the pipe whose end-of-file would tell it, so it waits for the workers to go first.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.parent = os.getppid()
        self.busy = False
        #: the running job's clock and how long it may run on it (None: no job, or no limit)
        self.limit: tuple[JobClock, float] | None = None
        threading.Thread(target=self._watch, name="pt2serde-worker-watch", daemon=True).start()

    def start_job(self, timeout: float | None) -> None:
        """Arm the deadline (and the CPU limit) for a job of at most `timeout` seconds."""
        self.busy = True
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        if timeout is None:
            self.limit = None
            resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
            return
        grace = timeout + SELF_KILL_GRACE_S
        # the job runs on this (main) thread: the pool times it on the same clock
        self.limit = (JobClock(os.getpid()), grace)
        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = used.ru_utime + used.ru_stime
        # CPU time adds up over every thread: torch's intra-op threads may each use the whole job
        soft = int(spent + grace * (os.cpu_count() or 1)) + 1
        if hard == resource.RLIM_INFINITY or soft < hard:
            # SIGXCPU's default action ends the process, even one stuck in C code
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))

    def end_job(self) -> None:
        """Disarm the deadline."""
        self.busy = False
        self.limit = None

    def _watch(self) -> None:
        while True:
            time.sleep(WATCH_INTERVAL_S)
            limit = self.limit
            late = limit is not None and limit[0].elapsed() > limit[1]
            # during a job the pool sends nothing: a readable pipe is its end-of-file
            orphaned = os.getppid() != self.parent or (self.busy and self._pipe_readable())
            if late or orphaned:
                os._exit(1)

    def _pipe_readable(self) -> bool:
        try:
            return self.conn.poll(0)
        except (OSError, EOFError):
            return True


def _run(data: bytes, watch: _Watch) -> tuple[Any, ...] | None:
    try:
        message = ForkingPickler.loads(data)
        if message is None:
            return None
        # the job is a function pickled by reference: unpickling it imported its module here
        job, args, timeout = message
        watch.start_job(timeout)
        try:
            return ("ok", job(*args))
        finally:
            watch.end_job()
    except Failure as exc:
        return ("failure", type(exc), exc.code, exc.message, exc.issues)
    except SchemaError as exc:
        # the schema layer's coded errors answer as they do in the API process (not
        # worker-job-failed); a Failure carries their code, message and issues across
        return ("failure", Failure, exc.code, str(exc), getattr(exc, "issues", []))
    except Exception as exc:
        if is_allocation_failure(exc):
            return ("oom", one_line(exc))
        return ("error", type(exc).__name__, one_line(exc))


def _limit_memory(memory_mb: int, setting: str) -> None:
    limit = memory_mb * MiB
    with contextlib.suppress(OSError, ValueError):
        # /proc is Linux-only; elsewhere the limit alone has to do.
        with open("/proc/self/statm") as statm:
            footprint = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        if footprint >= limit:
            raise MemoryError(
                f"{setting}={memory_mb} is below the worker's footprint after imports "
                f"({footprint // MiB} MiB)"
            )
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    # The hard limit too: code a hostile document gets to run cannot lift it again.
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
