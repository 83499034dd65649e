"""A job's time limit measures its own execution: on a host with more busy processes than cores,
the time a job waits for a core is not counted against it (under the mixed load of
bench/mixed.py, pushes were killed as worker-timeout while they waited for the CPU), while a job
that hangs still is."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.workers.clock import JobClock, run_queue_wait_s
from app.workers.pool import WorkerPool
from tests.workers import jobs
from tests.workers.conftest import spec

#: processes that compute for ever on the workers' one core, besides the jobs
HOGS = 3
#: each job's work (CPU seconds) and time limit: with the hogs, its wall time is several limits
WORK_S = 0.3
LIMIT_S = 1.0
JOBS = 4

needs_schedstat = pytest.mark.skipif(
    run_queue_wait_s(os.getpid()) is None, reason="no /proc/<pid>/task/<tid>/schedstat here"
)


@pytest.fixture
def one_core() -> Iterator[int]:
    """A core that HOGS processes keep busy for the test's length."""
    core = min(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS)]
    try:
        for hog in hogs:
            os.sched_setaffinity(hog.pid, {core})
        yield core
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@needs_schedstat
def test_jobs_waiting_for_a_core_are_not_timed_out(one_core: int) -> None:
    with WorkerPool(spec(workers=2, preload=())) as pool:
        with ThreadPoolExecutor(2) as started:
            list(started.map(lambda _: pool.submit(jobs.pid), range(2)))
        for pid in pool.worker_pids():
            os.sched_setaffinity(pid, {one_core})
        # more jobs than workers (two queue), each well within its own limit
        with ThreadPoolExecutor(JOBS) as clients:
            walls = list(
                clients.map(
                    lambda _: pool.submit(jobs.burn, WORK_S, timeout_s=LIMIT_S), range(JOBS)
                )
            )
    # the load was real: on the wall, jobs ran past their limit; none was killed for it
    assert max(walls) > LIMIT_S, walls


@needs_schedstat
def test_the_job_clock_leaves_out_the_wait_for_a_core(one_core: int) -> None:
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {one_core})
    try:
        clock = JobClock(os.getpid(), threading.get_native_id())
        end = time.thread_time() + WORK_S
        while time.thread_time() < end:
            pass
        wall = time.monotonic() - clock.started
        elapsed = clock.elapsed()
    finally:
        os.sched_setaffinity(0, affinity)
    assert wall > 2 * WORK_S  # it shared its core with the hogs
    assert WORK_S <= elapsed < wall - WORK_S, (elapsed, wall)


def test_the_job_clock_counts_time_blocked() -> None:
    clock = JobClock(os.getpid(), threading.get_native_id())
    time.sleep(0.2)
    assert clock.elapsed() >= 0.2
