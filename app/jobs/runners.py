"""What runs a job: the shapes the callers of app.jobs hand in, and the runner that runs one here.

A document job runs through something with `run(job, *args)` (an admitted request's `Work`,
which picks this process or a document worker by size); a torch job through something with
`submit(job, *args)` (the torch pool). Both take the job function itself, so mypy checks its
arguments and its result against the job's signature. `Inline` runs either kind in this process:
the library's own callers (tests, the bench) that hold torch already, or read small programs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar, TypeVarTuple

R = TypeVar("R")
Ts = TypeVarTuple("Ts")


class DocumentWork(Protocol):
    """Runs a document job, here or in a document worker."""

    def run(self, job: Callable[[*Ts], R], *args: *Ts) -> R:
        """`job(*args)`, wherever it runs."""
        ...


class TorchRunner(Protocol):
    """Runs a torch job (app.jobs.torch) in a worker that holds torch."""

    def submit(self, job: Callable[[*Ts], R], *args: *Ts, timeout_s: float | None = None) -> R:
        """`job(*args)` in a torch worker."""
        ...


class Inline:
    """Runs every job in this process (which then needs torch for a torch job)."""

    def run(self, job: Callable[[*Ts], R], *args: *Ts) -> R:
        """`job(*args)` here."""
        return job(*args)

    def submit(self, job: Callable[[*Ts], R], *args: *Ts, timeout_s: float | None = None) -> R:
        """`job(*args)` here, with no time limit."""
        return job(*args)


#: The runner that runs a job here.
INLINE = Inline()
