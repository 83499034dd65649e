"""A push that SIGKILLs its own process at a chosen step: `python -m tests.registry.crash_push`.

Arguments: the step and the .pt2 to push; the registry's settings come from the PT2SERDE_*
(and AWS_*) variables.
The steps are reached by wrapping registry methods here, in this test process only; the
registry's code has no fault hooks. The torch check is stubbed as passing (this process never
loads torch): what is tested is storage, not validation.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.jobs import push
from app.jobs.runners import INLINE
from app.jobs.torch import job_torch_check
from app.programs.torch_check import TorchCheck
from app.registry import storing
from app.registry.blobs import BlobStore
from app.registry.store import Registry
from app.settings import Settings

#: step -> (class or module, function) whose call is followed by SIGKILL (on its `nth` call).
STEPS: dict[str, tuple[Any, str, int]] = {
    "canonical-staged": (BlobStore, "stage_bytes", 1),
    "parts-staged": (storing, "stage_parts", 1),
    "objects-stored": (storing, "upload", 1),
    "rows-inserted": (Registry, "_insert", 1),
    "committed": (Registry, "version", 1),
}
#: the step that kills before the push starts storing: the upload is staged, nothing else.
STAGED = "staged"
EXIT_NOT_KILLED = 3


class PassingTorchCheck:
    """A torch runner whose check finds nothing."""

    def submit(self, job: Callable[..., Any], *args: object, timeout_s: float | None = None) -> Any:
        """An empty TorchCheck as a worker answers it."""
        assert job is job_torch_check, job
        return TorchCheck().to_dict()


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_after(owner: Any, name: str, nth: int) -> None:
    original: Callable[..., Any] = getattr(owner, name)
    calls = 0

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        result = original(*args, **kwargs)
        calls += 1
        if calls == nth:
            _die()
        return result

    setattr(owner, name, wrapper)


def main() -> int:
    """Open the registry, arm the step, push."""
    step, archive = sys.argv[1:]
    settings = Settings.from_env(dict(os.environ))
    registry = Registry(settings)
    staged = registry.blobs.stage()
    staged.write(Path(archive).read_bytes())
    staged.finish()
    if step == STAGED:
        _die()
    _kill_after(*STEPS[step])
    registry.push("crashy", push.prepare(registry, staged.path, INLINE, PassingTorchCheck()))
    return EXIT_NOT_KILLED


if __name__ == "__main__":
    sys.exit(main())
