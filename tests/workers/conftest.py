"""A small document pool for the worker tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from app.settings import Settings
from app.workers.pool import PoolSpec, WorkerPool
from app.workers.runner import document_spec


def spec(**changes: object) -> PoolSpec:
    """The document pool's spec from default settings, with these fields changed."""
    base = document_spec(Settings(document_workers=1, document_worker_memory_mb=0))
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def documents() -> Iterator[WorkerPool]:
    """One document worker as the service starts it (its preload is most of its start-up)."""
    with WorkerPool(spec(workers=1)) as pool:
        yield pool


@pytest.fixture(scope="module")
def bare() -> Iterator[WorkerPool]:
    """One worker that preloads nothing (quick to replace), recycled every two jobs, with an
    address-space limit."""
    with WorkerPool(spec(workers=1, preload=(), max_jobs=2, memory_mb=1024)) as pool:
        yield pool
