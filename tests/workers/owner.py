"""A pool's owner killed mid-job: which of its processes outlive it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.processes import alive


def survivors(script: str, marker: Path, within_s: float = 5.0) -> list[int]:
    """Run `script` (a pool in a process of its own that prints the pids it wants watched, then
    starts a long job that writes `marker`, its one argument), SIGKILL it once the job runs, and
    return the watched pids still alive `within_s` seconds later."""
    owner = subprocess.Popen(
        [sys.executable, "-c", script, str(marker)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert owner.stdout is not None
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) >= 2, pids
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the long job did not start"
        assert all(alive(pid) for pid in pids)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        gone_by = time.monotonic() + within_s
        while any(alive(pid) for pid in pids) and time.monotonic() < gone_by:
            time.sleep(0.05)
        return [pid for pid in pids if alive(pid)]
    finally:
        # whatever the outcome, nothing of this test keeps running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
