"""Torch workers do not outlive the process that runs their pool: SIGKILL it during a long job,
and its forkserver and the busy worker are gone within seconds."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT

#: A pool in a process of its own, running one long job; it prints its forkserver's and worker's
#: pids, then blocks in submit.
POOL_SCRIPT = """
import sys
from multiprocessing import forkserver
from app.bridge.pool import WorkerPool
from app.settings import Settings

pool = WorkerPool(Settings(workers=1, job_timeout_s=300, worker_memory_mb=0, worker_idle_s=0))
pool.submit("job_ping")
print(forkserver._forkserver._forkserver_pid, *pool.worker_pids(), flush=True)
pool.submit("tests.api.test_limits_workers:sleep_job", sys.argv[1], 120)
"""


def sleep_job(marker: str, seconds: float) -> None:
    """A long job (run in a worker): says it started, then sleeps."""
    Path(marker).write_text("started")
    time.sleep(seconds)


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_workers_die_with_their_pool_process(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    owner = subprocess.Popen(
        [sys.executable, "-c", POOL_SCRIPT, str(marker)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert owner.stdout is not None
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 2, pids
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), "the long job did not start"
        assert all(alive(pid) for pid in pids)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
        gone_by = time.monotonic() + 5
        while any(alive(pid) for pid in pids) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert [pid for pid in pids if alive(pid)] == []
    finally:
        # whatever the outcome, nothing of this test keeps running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
