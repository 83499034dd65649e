"""The clock a job's time limit is measured on: its own execution, not the machine's load.

A job's wall time stretches with everything else the host runs: on a loaded host (more busy
processes than cores, as under a mixed load) a job that needs 2 s of work can take 30 s to get it,
most of them spent runnable but waiting for a core. That wait is the host's, not the job's, so it
is not counted: a job's clock is its wall time less the time the thread running it spent waiting
on the scheduler's run queue (Linux's /proc/<pid>/task/<tid>/schedstat). Time the job spends
blocked (sleeping, on a lock, on I/O) or running is counted, so a job that hangs still reaches its
limit. Where the run queue's wait cannot be read, the clock is wall time. The CPU time limit a
worker sets itself (RLIMIT_CPU) bounds what a job can make itself wait for.
"""

from __future__ import annotations

import time


def run_queue_wait_s(pid: int, tid: int | None = None) -> float | None:
    """Seconds thread `tid` of process `pid` (its main thread by default) has spent runnable but
    waiting for a core, since it started (None: not readable here)."""
    try:
        with open(f"/proc/{pid}/task/{tid or pid}/schedstat", "rb") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class JobClock:
    """A job's execution time: wall time since `start` less its thread's run-queue wait."""

    def __init__(self, pid: int, tid: int | None = None) -> None:
        self.pid = pid
        self.tid = tid
        self.started = time.monotonic()
        self.waited_at_start = run_queue_wait_s(pid, tid)

    def elapsed(self) -> float:
        """Seconds the job has been executing (or blocked) since the clock started."""
        wall = time.monotonic() - self.started
        if self.waited_at_start is None:
            return wall
        now = run_queue_wait_s(self.pid, self.tid)
        if now is None:
            return wall  # the process is gone: its reply or its death will be seen at once
        return max(0.0, wall - (now - self.waited_at_start))
