"""A pool of worker processes that run jobs for the service, one job at a time each.

One design for every kind of job (torch's, and the torch-free document jobs): a hostile document
can crash, hang or bloat the process that reads it, so the service runs that work here. Each pool
has its own `PoolSpec`: how many workers, what they import, how they are started, their
address-space limit, their job time limits, and when they are recycled. Workers are replaced on
timeout or death, recycled after a number of jobs or after a job that left them holding more
than a resident-set limit (memory a process freed is mostly kept by its allocator, so a worker
that once read a large program would keep its peak for life), and exit once they have sat idle
after a job (their slot is refilled when a job needs it). Only our own values cross the process
boundary (multiprocessing pickles them; a job is a module-level function, pickled by reference,
whose module the worker imports); uploads reach a worker as the paths of their files, which
it reads itself, so the service process never holds a program.
"""

from __future__ import annotations

import contextlib
import enum
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from typing import Any, TypeVar, TypeVarTuple, cast

from app.failure import Failure, ProblemCode, one_line
from app.workers.clock import JobClock
from app.workers.failures import WorkerFailure
from app.workers.worker import WorkerConfig, worker_main

#: A job's result, and its arguments: `submit` is checked against the job's own signature.
R = TypeVar("R")
Ts = TypeVarTuple("Ts")

MiB = 1024 * 1024
STARTUP_TIMEOUT_S = 120.0
_STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class PoolSpec:
    """What makes one pool what it is; `app.workers.torch` and `app.workers.runner` build one
    from the settings."""

    #: "torch" or "document": in process names and messages
    kind: str
    workers: int
    #: modules every worker imports before its first job (a forkserver preloads them, once)
    preload: tuple[str, ...]
    #: modules each worker imports after it starts (a forkserver does not share them)
    imports: tuple[str, ...]
    #: "forkserver" forks warm workers from a process that preloaded `preload`; "spawn" starts
    #: fresh interpreters (multiprocessing has one forkserver per process: one pool may use it)
    start_method: str
    memory_mb: int
    #: the ceiling of every job's time limit (0: none)
    job_timeout_s: float
    #: a job's time limit is this plus job_timeout_per_mb_s per MiB of its input (0: ceiling)
    job_timeout_base_s: float
    job_timeout_per_mb_s: float
    #: a worker is replaced after this many jobs (0: never)
    max_jobs: int
    #: a worker idle this long after a job exits (0: never)
    idle_s: float
    #: a worker whose resident set is over this many MiB after a job is replaced (0: never):
    #: what a large job made it hold is not given back to the system while it lives
    recycle_rss_mb: int = 0
    #: start the replacement of a worker recycled for its size at once (a spawned worker takes
    #: a second or more to import), or only when a job needs it (a forked one starts fast, and
    #: an idle one holds memory)
    refill_at_once: bool = True
    #: start every worker with the pool, or only the first one and each other one when jobs
    #: overlap (a forked torch worker's resident set counts all of torch again)
    start_all: bool = True
    #: the settings' prefix of these knobs, to name them in messages ("" or "document_")
    setting_prefix: str = ""
    #: the class of the failures the pool raises itself
    failure: type[Failure] = WorkerFailure

    def time_limit(self, size: int) -> float | None:
        """The time limit of a job given `size` bytes, before the ceiling (None: the ceiling)."""
        if self.job_timeout_base_s <= 0:
            return None
        return self.job_timeout_base_s + self.job_timeout_per_mb_s * size / MiB

    def config(self) -> WorkerConfig:
        """What each worker is told at start."""
        return WorkerConfig(
            memory_mb=self.memory_mb,
            memory_setting=f"{self.setting_prefix}worker_memory_mb",
            imports=(*self.preload, *self.imports),
            parent_death_signal=self.start_method == "forkserver",
        )


class _Fate(enum.Enum):
    """What becomes of a worker after its job: back to the idle queue, replaced by a fresh one,
    or stopped with its slot left vacant until a job needs it."""

    KEEP = "keep"
    REPLACE = "replace"
    VACATE = "vacate"


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
    """`spec.workers` processes; `submit` blocks until a worker has run the job."""

    def __init__(self, spec: PoolSpec, *, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        if spec.workers < 1:
            raise ValueError(f"a worker pool needs at least one worker, got {spec.workers}")
        self.spec = spec
        self._config = spec.config()
        self._startup_timeout_s = startup_timeout_s
        self._ctx = multiprocessing.get_context(spec.start_method)
        if spec.start_method == "forkserver":
            # Global to the forkserver, and only read when it first starts; harmless if late.
            self._ctx.set_forkserver_preload(list(spec.preload))
        self._lock = threading.Lock()
        self._idle: queue.Queue[_Worker | _Slot] = queue.Queue()
        self._workers: set[_Worker] = set()
        self._busy: set[_Worker] = set()
        self._closed = False
        self._stopping = threading.Event()
        for started in range(spec.workers):
            self._idle.put(self._start() if spec.start_all or not started else _Slot.VACANT)
        if spec.idle_s > 0:
            threading.Thread(
                target=self._retire_idle, name=f"pt2serde-{spec.kind}-retirer", daemon=True
            ).start()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, job: Callable[[*Ts], R], *args: *Ts, timeout_s: float | None = None) -> R:
        """Run `job(*args)` in a worker, return its result; thread-safe, queues while all are busy.

        `job` is a module-level function (pickled by reference). A Failure the job raises is
        raised here with its code and issues; a dead worker raises `worker-crashed`, a slow one
        `worker-timeout`, a MemoryError `worker-out-of-memory`. The job's time limit is
        `timeout_s`, or else grows with the size of what it is given (job_timeout_base_s plus
        job_timeout_per_mb_s per MiB of arguments and files); either way job_timeout_s is the
        ceiling.
        """
        timeout = self._timeout(timeout_s if timeout_s is not None else self._scaled(args))
        payload = self._payload(job, args, timeout)
        return cast(R, self._run_on(self._take(), payload, timeout))

    def submit_if_idle(
        self, job: Callable[[*Ts], R], *args: *Ts, timeout_s: float | None = None
    ) -> tuple[bool, R | None]:
        """`submit` if a started worker is idle at this moment: (True, its result); otherwise
        (False, None) at once, without waiting for a worker or starting one."""
        worker = self._take_idle()
        if worker is None:
            return False, None
        try:
            timeout = self._timeout(timeout_s if timeout_s is not None else self._scaled(args))
            payload = self._payload(job, args, timeout)
        except BaseException:
            self._give_back(worker, _Fate.KEEP)
            raise
        return True, cast(R, self._run_on(worker, payload, timeout))

    def _run_on(self, worker: _Worker, payload: memoryview, timeout: float | None) -> Any:
        fate = _Fate.REPLACE
        try:
            self._await_ready(worker)
            reply = self._exchange(worker, payload, timeout)
            worker.jobs += 1
            fate = self._fate(worker, reply)
        finally:
            self._give_back(worker, fate)
        return self._outcome(reply)

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

    def _fail(self, code: ProblemCode, message: str) -> Failure:
        return self.spec.failure(code, message)

    def _scaled(self, args: tuple[Any, ...]) -> float | None:
        size = 0
        for arg in args:
            if isinstance(arg, bytes | bytearray | memoryview | str):
                size += len(arg)
            elif isinstance(arg, os.PathLike):
                with contextlib.suppress(OSError):
                    size += os.path.getsize(arg)
        return self.spec.time_limit(size)

    def _timeout(self, asked: float | None) -> float | None:
        ceiling = self.spec.job_timeout_s if self.spec.job_timeout_s > 0 else None
        if asked is None or asked <= 0:
            return ceiling
        return asked if ceiling is None else min(asked, ceiling)

    def _payload(
        self, job: Callable[..., Any], args: tuple[Any, ...], timeout: float | None
    ) -> memoryview:
        try:
            return ForkingPickler.dumps((job, args, timeout))
        except Exception as exc:
            raise self._fail("worker-bad-job", f"the job cannot be sent: {one_line(exc)}") from None

    def _closed_failure(self, during: str = "") -> Failure:
        return self._fail("worker-pool-closed", f"the {self.spec.kind} worker pool {during}")

    def _take(self) -> _Worker:
        if self._closed:
            raise self._closed_failure("is closed")
        item = self._idle.get()
        if item is _Slot.VACANT:
            item = self._idle_worker_first()
        if item is _Slot.CLOSED or self._closed:
            # Pass the wake-up on to the next waiting submitter.
            self._idle.put(_Slot.CLOSED)
            if isinstance(item, _Worker):
                self._stop(item, graceful=False)
            raise self._closed_failure("is closed")
        if isinstance(item, _Worker):
            if item.process.is_alive():
                return item
            # Died while idle (killed, OOM-reaped): no job was sent, so replace it silently.
            self._stop(item, graceful=False)
        try:
            return self._start()
        except Failure:
            self._idle.put(_Slot.VACANT)
            raise

    def _take_idle(self) -> _Worker | None:
        """An idle worker that is alive and has finished starting, if one is queued now (the
        items passed over keep their places, ahead of anything queued meanwhile)."""
        passed: list[_Worker | _Slot] = []
        found: _Worker | None = None
        with contextlib.suppress(queue.Empty):
            while found is None and not self._closed:
                item = self._idle.get_nowait()
                if isinstance(item, _Worker) and item.process.is_alive() and _started(item):
                    found = item
                else:
                    passed.append(item)
        for item in passed:
            self._idle.put(item)
        return found

    def _idle_worker_first(self) -> _Worker | _Slot:
        """Having drawn a vacant slot: an idle worker (or the closing marker) queued behind it
        instead, if there is one, since starting a worker costs its start-up and its memory."""
        vacant = [_Slot.VACANT]
        found: _Worker | _Slot = _Slot.VACANT
        with contextlib.suppress(queue.Empty):
            while found is _Slot.VACANT:
                found = self._idle.get_nowait()
                if found is _Slot.VACANT:
                    vacant.append(found)
        if found is _Slot.VACANT:
            vacant.pop()  # the slot this submitter fills
        for slot in vacant:
            self._idle.put(slot)
        return found

    def _start(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(  # type: ignore[attr-defined]
            target=worker_main,
            args=(child, self._config),
            name=f"pt2serde-{self.spec.kind}-worker",
            daemon=True,
        )
        try:
            process.start()
        except OSError as exc:
            parent.close()
            raise self._fail("worker-start-failed", one_line(exc)) from None
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
            raise self._fail("worker-start-failed", message[1])
        if not ready:
            raise self._fail(
                "worker-start-failed", f"the worker did not start within {self._startup_timeout_s}s"
            )
        raise self._fail("worker-start-failed", f"the worker {_death(worker)} while starting")

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
            clock = JobClock(worker.pid)
            worker.conn.send_bytes(payload)
            ready = _await_reply(worker, clock, timeout)
            if worker.conn in ready:
                reply: tuple[Any, ...] = worker.conn.recv()
                return reply
        except (EOFError, OSError):
            ready = [worker.process.sentinel]
        except Exception as exc:
            self._stop(worker, graceful=False)
            raise self._fail("worker-crashed", f"unreadable reply: {one_line(exc)}") from None
        self._stop(worker, graceful=False)
        if self._closed:
            raise self._closed_failure("was closed during the job")
        if not ready:
            ceiling = f"{self.spec.setting_prefix}job_timeout_s={self.spec.job_timeout_s}"
            raise self._fail(
                "worker-timeout",
                f"the job ran past its time limit of {timeout}s ({ceiling}) and was killed",
            )
        raise self._fail(
            "worker-crashed", f"the worker (pid {worker.pid}) {_death(worker)} during the job"
        )

    def _fate(self, worker: _Worker, reply: tuple[Any, ...]) -> _Fate:
        """A worker is replaced after a refused allocation or its last allowed job, and recycled
        when its job left it holding more than recycle_rss_mb."""
        max_jobs = self.spec.max_jobs
        if reply[0] == "oom" or (max_jobs > 0 and worker.jobs >= max_jobs):
            return _Fate.REPLACE
        limit = self.spec.recycle_rss_mb
        if limit > 0 and (resident_bytes(worker.pid) or 0) > limit * MiB:
            return _Fate.REPLACE if self.spec.refill_at_once else _Fate.VACATE
        return _Fate.KEEP

    def _give_back(self, worker: _Worker, fate: _Fate) -> None:
        if fate is _Fate.KEEP and not self._closed:
            worker.idle_since = time.monotonic()
            self._idle.put(worker)
            return
        self._stop(worker, graceful=True)
        if self._closed:
            self._idle.put(_Slot.CLOSED)
            return
        if fate is _Fate.VACATE:
            self._idle.put(_Slot.VACANT)
            return
        try:
            self._idle.put(self._start())
        except Failure:
            self._idle.put(_Slot.VACANT)

    def _retire_idle(self) -> None:
        """Stop workers idle past idle_s since their last job; their slots start vacant."""
        idle_s = self.spec.idle_s
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

    def _outcome(self, reply: tuple[Any, ...]) -> Any:
        status = reply[0]
        if status == "ok":
            return reply[1]
        if status == "failure":
            cls, code, message, issues = reply[1:]
            if not (isinstance(cls, type) and issubclass(cls, Failure)):
                cls = self.spec.failure
            failure = cls.__new__(cls)
            Failure.__init__(failure, code, message, issues)
            raise failure
        if status == "oom":
            raise self._fail("worker-out-of-memory", f"the job ran out of memory: {reply[1]}")
        raise self._fail("worker-job-failed", f"{reply[1]}: {reply[2]}")


def _await_reply(worker: _Worker, clock: JobClock, timeout: float | None) -> list[Any]:
    """Wait for the worker's reply or death until the job has run `timeout` seconds on its own
    clock (what the host's load kept it waiting for a core is not its time): [] past that."""
    waited_for: list[Connection | int] = [worker.conn, worker.process.sentinel]
    if timeout is None:
        return multiprocessing.connection.wait(waited_for)
    while True:
        # the job's clock runs no faster than the wall's: waiting out what is left is never late
        left = timeout - clock.elapsed()
        if left <= 0:
            return []
        ready = multiprocessing.connection.wait(waited_for, left)
        if ready:
            return ready


def _started(worker: _Worker) -> bool:
    """Whether the worker has said it is ready (its message waits in the pipe until a submitter
    reads it: `_await_ready` then returns at once)."""
    with contextlib.suppress(OSError, EOFError):
        return worker.ready or worker.conn.poll(0)
    return False


def resident_bytes(pid: int) -> int | None:
    """The resident set of process `pid` in bytes (None: gone, or no /proc here)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _death(worker: _Worker) -> str:
    code = worker.process.exitcode
    if code is None:
        return "stopped answering"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with status {code}"


class LazyPool:
    """A pool started by its first job (most HTTP processes of a small deployment never need
    one of them), stopped by `close`."""

    def __init__(self, spec: PoolSpec) -> None:
        self.spec = spec
        self._pool: WorkerPool | None = None
        self._lock = threading.Lock()

    def get(self) -> WorkerPool:
        """The pool, starting it on first use."""
        with self._lock:
            if self._pool is None:
                self._pool = self._make()
            return self._pool

    def _make(self) -> WorkerPool:
        return WorkerPool(self.spec)

    def submit(self, job: Callable[[*Ts], R], *args: *Ts, timeout_s: float | None = None) -> R:
        """Run a job in a worker (see WorkerPool.submit)."""
        return self.get().submit(job, *args, timeout_s=timeout_s)

    def submit_if_idle(
        self, job: Callable[[*Ts], R], *args: *Ts, timeout_s: float | None = None
    ) -> tuple[bool, R | None]:
        """`WorkerPool.submit_if_idle`, if the pool was started: never starts it."""
        with self._lock:
            pool = self._pool
        if pool is None:
            return False, None
        return pool.submit_if_idle(job, *args, timeout_s=timeout_s)

    def close(self) -> None:
        """Stop the workers, if they were started."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
