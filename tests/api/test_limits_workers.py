"""Torch workers do not outlive the process that runs their pool: SIGKILL it during a long job,
and its forkserver and the busy worker are gone within seconds."""

from __future__ import annotations

from pathlib import Path

from tests.workers.owner import survivors

#: A pool in a process of its own, running one long job; it prints its forkserver's and worker's
#: pids, then blocks in submit.
POOL_SCRIPT = """
import sys
from multiprocessing import forkserver
from app.jobs.torch import job_ping
from app.workers.torch import TorchPool
from tests.workers.jobs import sleep
from app.settings import Settings

pool = TorchPool(Settings(workers=1, job_timeout_s=300, worker_memory_mb=0, worker_idle_s=0))
pool.submit(job_ping)
print(forkserver._forkserver._forkserver_pid, *pool.worker_pids(), flush=True)
pool.submit(sleep, 120, sys.argv[1])
"""


def test_workers_die_with_their_pool_process(tmp_path: Path) -> None:
    # the forkserver exits through interpreter shutdown with torch loaded: 4-15 s on a busy host
    assert survivors(POOL_SCRIPT, tmp_path / "started", within_s=30) == []
