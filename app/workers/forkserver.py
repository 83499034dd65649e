"""Preloaded last by the torch pool's forkserver: its exit skips the interpreter's teardown.

The forkserver exits (SystemExit) once the process that runs the pool and every worker it forked
have ended. Tearing down an interpreter that holds torch took it 1-2 s on an idle host (4-15 s on
a busy one), holding all of torch's memory meanwhile; ended by `os._exit` it takes under 0.1 s.
It has nothing to flush or save: it only forks. Imported anywhere else, this module does
nothing (its workers are forked from it, and leave by `os._exit` anyway).
"""

from __future__ import annotations

import atexit
import os
import sys
from multiprocessing import forkserver


def _preloaded_by_forkserver() -> bool:
    """Whether this import runs inside multiprocessing's forkserver `main` (its preload)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is forkserver.main.__code__:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


if _preloaded_by_forkserver():
    # registered after torch's and the preloaded modules' own handlers, so it runs first
    atexit.register(os._exit, 0)
