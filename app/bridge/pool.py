"""Worker processes that run torch jobs for the service, one job at a time each.

torch's export load and save are not thread-safe, and a hostile document can crash, hang or
bloat the process that deserializes it; so the service runs them here. Workers are forked from
a forkserver that preloads torch (not from the threaded server), hold an address-space limit,
are killed and replaced on timeout or death, are recycled after a number of jobs, and exit once
they have sat idle after a job for `worker_idle_s` (their slot is refilled when a job needs it).
Only our own values cross the process boundary (multiprocessing pickles them); uploads reach a
worker as the paths of their files, which it reads itself (and results it writes to a path it is
given), so the service process never holds a program's tensors.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import multiprocessing
import multiprocessing.connection
import os
import queue
import resource
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from typing import Any

from app.bridge.errors import BridgeFailure, is_allocation_failure, one_line
from app.failure import Failure
from app.settings import MiB, Settings

#: What a worker imports before its first job; the forkserver preloads it so forks start warm.
PRELOAD: tuple[str, ...] = ("torch", "app.bridge.exported", "app.bridge.checks")
#: Where a job given by bare name is looked up.
JOBS_MODULE = "app.bridge.jobs"
STARTUP_TIMEOUT_S = 120.0
_STOP_GRACE_S = 5.0
#: A worker ends itself this long after its job's time limit: the pool normally kills it first
#: (and says worker-timeout), but the worker must not outlive a pool that died.
_SELF_KILL_GRACE_S = 5.0
#: How often a worker looks at its parent and its job's deadline.
_WATCH_INTERVAL_S = 0.5

Job = str | Callable[..., Any]


class _Slot(enum.Enum):
    """Queue markers besides workers: a slot whose worker could not be started, a closed pool."""

    VACANT = "vacant"
    CLOSED = "closed"


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.jobs = 0
        self.ready = False
        #: When the worker last went back to the idle queue (time.monotonic()).
        self.idle_since = time.monotonic()

    @property
    def pid(self) -> int:
        """The worker's process id."""
        pid = self.process.pid
        if pid is None:
            raise RuntimeError("a worker exists only once its process has started")
        return pid


class WorkerPool:
    """`settings.workers` torch processes; `submit` blocks until a worker has run the job."""

    def __init__(
        self,
        settings: Settings,
        *,
        start_method: str = "forkserver",
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ) -> None:
        if settings.workers < 1:
            raise ValueError(f"a worker pool needs at least one worker, got {settings.workers}")
        self._settings = settings
        self._startup_timeout_s = startup_timeout_s
        self._ctx = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            # Global to the forkserver, and only read when it first starts; harmless if late.
            self._ctx.set_forkserver_preload(list(PRELOAD))
        self._lock = threading.Lock()
        self._idle: queue.Queue[_Worker | _Slot] = queue.Queue()
        self._workers: set[_Worker] = set()
        self._busy: set[_Worker] = set()
        self._closed = False
        self._stopping = threading.Event()
        for _ in range(settings.workers):
            self._idle.put(self._start())
        if settings.worker_idle_s > 0:
            threading.Thread(
                target=self._retire_idle, name="pt2serde-worker-retirer", daemon=True
            ).start()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, job: Job, *args: Any, timeout_s: float | None = None) -> Any:
        """Run `job(*args)` in a worker, return its result; thread-safe, queues while all are busy.

        `job` is a module-level function or the name of one in app.bridge.jobs ("module:name" for
        others). A Failure the job raises is raised here with its code and issues; a dead worker
        raises `worker-crashed`, a slow one `worker-timeout`, a MemoryError `worker-out-of-memory`.
        The job's time limit is `timeout_s`, or else grows with the size of what it is given
        (job_timeout_base_s plus job_timeout_per_mb_s per MiB of arguments and files); either
        way job_timeout_s is the ceiling.
        """
        timeout = self._timeout(timeout_s if timeout_s is not None else self._scaled(args))
        payload = self._payload(job, args, timeout)
        worker = self._take()
        healthy = False
        try:
            self._await_ready(worker)
            reply = self._exchange(worker, payload, timeout)
            worker.jobs += 1
            max_jobs = self._settings.worker_max_jobs
            healthy = reply[0] != "oom" and (max_jobs <= 0 or worker.jobs < max_jobs)
        finally:
            self._give_back(worker, healthy)
        return _outcome(reply)

    def worker_pids(self) -> list[int]:
        """Process ids of every live worker."""
        with self._lock:
            return sorted(w.pid for w in self._workers)

    def busy_pids(self) -> list[int]:
        """Process ids of the workers running a job right now."""
        with self._lock:
            return sorted(w.pid for w in self._busy)

    def close(self) -> None:
        """Stop every worker; running jobs fail with `worker-pool-closed`, later submits too."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = list(self._workers)
            busy = set(self._busy)
        self._stopping.set()
        self._idle.put(_Slot.CLOSED)
        for worker in workers:
            if worker in busy:
                # Its submitter owns the pipe: killing the process is enough to wake it.
                worker.process.kill()
            else:
                self._stop(worker, graceful=False)

    def _scaled(self, args: tuple[Any, ...]) -> float | None:
        settings = self._settings
        if settings.job_timeout_base_s <= 0:
            return None
        size = 0
        for arg in args:
            if isinstance(arg, bytes | bytearray | memoryview | str):
                size += len(arg)
            elif isinstance(arg, os.PathLike):
                with contextlib.suppress(OSError):
                    size += os.path.getsize(arg)
        return settings.job_timeout_base_s + settings.job_timeout_per_mb_s * size / MiB

    def _timeout(self, asked: float | None) -> float | None:
        ceiling = self._settings.job_timeout_s if self._settings.job_timeout_s > 0 else None
        if asked is None or asked <= 0:
            return ceiling
        return asked if ceiling is None else min(asked, ceiling)

    def _payload(self, job: Job, args: tuple[Any, ...], timeout: float | None) -> memoryview:
        try:
            return ForkingPickler.dumps((job, args, timeout))
        except Exception as exc:
            raise BridgeFailure(
                "worker-bad-job", f"the job cannot be sent: {one_line(exc)}"
            ) from None

    def _take(self) -> _Worker:
        if self._closed:
            raise BridgeFailure("worker-pool-closed", "the worker pool is closed")
        item = self._idle.get()
        if item is _Slot.CLOSED or self._closed:
            # Pass the wake-up on to the next waiting submitter.
            self._idle.put(_Slot.CLOSED)
            if isinstance(item, _Worker):
                self._stop(item, graceful=False)
            raise BridgeFailure("worker-pool-closed", "the worker pool is closed")
        if isinstance(item, _Worker):
            if item.process.is_alive():
                return item
            # Died while idle (killed, OOM-reaped): no job was sent, so replace it silently.
            self._stop(item, graceful=False)
        try:
            return self._start()
        except BridgeFailure:
            self._idle.put(_Slot.VACANT)
            raise

    def _start(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(  # type: ignore[attr-defined]
            target=_worker_main,
            args=(child, self._settings.worker_memory_mb, self._settings.worker_imports),
            name="pt2serde-torch-worker",
            daemon=True,
        )
        try:
            process.start()
        except OSError as exc:
            parent.close()
            raise BridgeFailure("worker-start-failed", one_line(exc)) from None
        finally:
            child.close()
        worker = _Worker(process, parent)
        with self._lock:
            self._workers.add(worker)
        return worker

    def _await_ready(self, worker: _Worker) -> None:
        if worker.ready:
            return
        ready = multiprocessing.connection.wait(
            [worker.conn, worker.process.sentinel], self._startup_timeout_s
        )
        message: Any = None
        if worker.conn in ready:
            with contextlib.suppress(EOFError, OSError):
                message = worker.conn.recv()
        if isinstance(message, tuple) and message[0] == "ready":
            worker.ready = True
            return
        self._stop(worker, graceful=False)
        if isinstance(message, tuple) and message[0] == "failed":
            raise BridgeFailure("worker-start-failed", message[1])
        if not ready:
            raise BridgeFailure(
                "worker-start-failed", f"the worker did not start within {self._startup_timeout_s}s"
            )
        raise BridgeFailure("worker-start-failed", f"the worker {_death(worker)} while starting")

    def _exchange(
        self, worker: _Worker, payload: memoryview, timeout: float | None
    ) -> tuple[Any, ...]:
        with self._lock:
            self._busy.add(worker)
        try:
            return self._roundtrip(worker, payload, timeout)
        finally:
            with self._lock:
                self._busy.discard(worker)

    def _roundtrip(
        self, worker: _Worker, payload: memoryview, timeout: float | None
    ) -> tuple[Any, ...]:
        try:
            worker.conn.send_bytes(payload)
            ready = multiprocessing.connection.wait([worker.conn, worker.process.sentinel], timeout)
            if worker.conn in ready:
                reply: tuple[Any, ...] = worker.conn.recv()
                return reply
        except (EOFError, OSError):
            ready = [worker.process.sentinel]
        except Exception as exc:
            self._stop(worker, graceful=False)
            raise BridgeFailure("worker-crashed", f"unreadable reply: {one_line(exc)}") from None
        self._stop(worker, graceful=False)
        if self._closed:
            raise BridgeFailure("worker-pool-closed", "the worker pool was closed during the job")
        if not ready:
            raise BridgeFailure(
                "worker-timeout",
                f"the job ran past its time limit of {timeout}s "
                f"(job_timeout_s={self._settings.job_timeout_s}) and was killed",
            )
        raise BridgeFailure(
            "worker-crashed", f"the worker (pid {worker.pid}) {_death(worker)} during the job"
        )

    def _give_back(self, worker: _Worker, healthy: bool) -> None:
        if healthy and not self._closed:
            worker.idle_since = time.monotonic()
            self._idle.put(worker)
            return
        self._stop(worker, graceful=True)
        if self._closed:
            self._idle.put(_Slot.CLOSED)
            return
        try:
            self._idle.put(self._start())
        except BridgeFailure:
            self._idle.put(_Slot.VACANT)

    def _retire_idle(self) -> None:
        """Stop workers idle past worker_idle_s since their last job; their slots start vacant."""
        idle_s = self._settings.worker_idle_s
        while not self._stopping.wait(min(idle_s / 2, 30.0)):
            for worker in self._take_stale(time.monotonic() - idle_s):
                self._stop(worker, graceful=True)

    def _take_stale(self, cutoff: float) -> list[_Worker]:
        """Swap the idle workers that ran a job and went idle before `cutoff` for vacant slots."""
        items: list[_Worker | _Slot] = []
        with contextlib.suppress(queue.Empty):
            while True:
                items.append(self._idle.get_nowait())
        stale = [
            item
            for item in items
            if isinstance(item, _Worker) and item.jobs > 0 and item.idle_since <= cutoff
        ]
        # A submitter waiting meanwhile takes the first item put back.
        for item in items:
            self._idle.put(_Slot.VACANT if item in stale else item)
        return stale

    def _stop(self, worker: _Worker, *, graceful: bool) -> None:
        process = worker.process
        if graceful and process.is_alive():
            with contextlib.suppress(OSError):
                worker.conn.send(None)
            process.join(_STOP_GRACE_S)
        if process.is_alive():
            process.kill()
        process.join()
        worker.conn.close()
        with self._lock:
            self._workers.discard(worker)


def _death(worker: _Worker) -> str:
    code = worker.process.exitcode
    if code is None:
        return "stopped answering"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _outcome(reply: tuple[Any, ...]) -> Any:
    status = reply[0]
    if status == "ok":
        return reply[1]
    if status == "failure":
        cls, code, message, issues = reply[1:]
        if not (isinstance(cls, type) and issubclass(cls, Failure)):
            cls = BridgeFailure
        failure = cls.__new__(cls)
        Failure.__init__(failure, code, message, issues)
        raise failure
    if status == "oom":
        raise BridgeFailure("worker-out-of-memory", f"the job ran out of memory: {reply[1]}")
    raise BridgeFailure("worker-job-failed", f"{reply[1]}: {reply[2]}")


# ---------------------------------------------------------------- inside a worker


def _worker_main(conn: Connection, memory_mb: int, imports: tuple[str, ...]) -> None:
    """A worker's life: imports, memory limit, then one job per message until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch = _Watch(conn)
    try:
        for name in (*PRELOAD, *imports):
            importlib.import_module(name)
        if memory_mb > 0:
            _limit_memory(memory_mb)
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
            # A refused allocation can leave torch's or the allocator's state half-done.
            return


class _Watch:
    """A thread that ends the worker, so that it never outlives a pool that is gone: when the
    pool's end of the pipe closes during a job (the pool's process died), when its parent dies
    (the forkserver), or when a job runs past its deadline; the kernel's RLIMIT_CPU backs it up
    for a job that holds the GIL.

    The forkserver cannot notice the pool's death itself: every worker holds the write end of
    the pipe whose end-of-file would tell it, so it waits for the workers to go first.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.parent = os.getppid()
        self.busy = False
        self.deadline: float | None = None
        threading.Thread(target=self._watch, name="pt2serde-worker-watch", daemon=True).start()

    def start_job(self, timeout: float | None) -> None:
        """Arm the deadline (and the CPU limit) for a job of at most `timeout` seconds."""
        self.busy = True
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        if timeout is None:
            self.deadline = None
            resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
            return
        grace = timeout + _SELF_KILL_GRACE_S
        self.deadline = time.monotonic() + grace
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
        self.deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(_WATCH_INTERVAL_S)
            deadline = self.deadline
            late = deadline is not None and time.monotonic() > deadline
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
        job, args, timeout = message
        watch.start_job(timeout)
        try:
            return ("ok", _resolve(job)(*args))
        finally:
            watch.end_job()
    except Failure as exc:
        return ("failure", type(exc), exc.code, exc.message, exc.issues)
    except Exception as exc:
        if is_allocation_failure(exc):
            return ("oom", one_line(exc))
        return ("error", type(exc).__name__, one_line(exc))


def _resolve(job: Job) -> Callable[..., Any]:
    if callable(job):
        return job
    module, _, name = job.rpartition(":")
    function = getattr(importlib.import_module(module or JOBS_MODULE), name)
    if not callable(function):
        raise TypeError(f"{job!r} is not a function")
    return function  # type: ignore[no-any-return]


def _limit_memory(memory_mb: int) -> None:
    limit = memory_mb * MiB
    with contextlib.suppress(OSError, ValueError):
        # /proc is Linux-only; elsewhere the limit alone has to do.
        with open("/proc/self/statm") as statm:
            footprint = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        if footprint >= limit:
            raise MemoryError(
                f"worker_memory_mb={memory_mb} is below the worker's footprint after imports "
                f"({footprint // MiB} MiB)"
            )
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    # The hard limit too: code a hostile document gets to run cannot lift it again.
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
