"""Processes that end with the process that started them, and stops that end in bounded time.

Whatever ends a parent (SIGKILL, the OOM killer, a crash), what it started must not live on
holding the port, files and memory. Two means cover each other's gaps: the kernel's parent-death
signal (Linux prctl PR_SET_PDEATHSIG) arrives at once, but only when the *thread* that forked
the child ends, so it is sound only where that thread lives as long as its process, and it is
lost if the parent ended before it was asked for; a thread that looks at getppid() every
WATCH_INTERVAL_S sees any parent's end (the orphan is reparented), a little later.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable

#: How often a watching thread looks at its process's parent.
WATCH_INTERVAL_S = 0.5
#: prctl(2) option: the signal the kernel sends us when the thread that forked us ends.
_PR_SET_PDEATHSIG = 1

_deadline_lock = threading.Lock()
_deadline_armed = False


def signal_on_parent_death(parent: int, signum: int) -> bool:
    """Ask the kernel for `signum` when our parent ends; False if our parent is no longer
    `parent` once asked (it ended before the request took effect, or it was never ours)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    return os.getppid() == parent


def watch_parent(parent: int, orphaned: Callable[[], None], name: str) -> None:
    """Call `orphaned` once, on a daemon thread, when our parent is no longer `parent`."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_INTERVAL_S)
        orphaned()

    threading.Thread(target=watch, name=name, daemon=True).start()


def kill_self_after(seconds: float) -> None:
    """SIGKILL this process `seconds` from now, from a daemon thread, unless it has ended by
    then (the first call arms it; later calls change nothing)."""
    global _deadline_armed
    with _deadline_lock:
        if _deadline_armed:
            return
        _deadline_armed = True

    def expire() -> None:
        time.sleep(seconds)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=expire, name="pt2serde-stop-deadline", daemon=True).start()
