"""The failures the worker pools raise themselves."""

from __future__ import annotations

from app.failure import Failure


class WorkerFailure(Failure):
    """A coded failure of a worker pool (crash, timeout, memory, start, closed) or of its job."""
