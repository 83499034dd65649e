"""Workers give their memory back: one that a job left holding more than recycle_rss_mb is
replaced (at once, or when the next job needs it), and that next job runs; the document pool
can start with its HTTP process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.jobs.torch import job_ping
from app.settings import MiB, Settings
from app.workers.pool import WorkerPool, resident_bytes
from app.workers.runner import DocumentRunner, document_spec
from app.workers.torch import TorchPool, torch_spec
from tests.processes import alive
from tests.workers import jobs
from tests.workers.conftest import spec

LIMIT_MB = 96


@pytest.fixture
def refilling() -> Iterator[WorkerPool]:
    with WorkerPool(spec(workers=1, preload=(), recycle_rss_mb=LIMIT_MB)) as pool:
        yield pool


@pytest.fixture
def vacating() -> Iterator[WorkerPool]:
    changes = {"workers": 1, "preload": (), "recycle_rss_mb": LIMIT_MB, "refill_at_once": False}
    with WorkerPool(spec(**changes)) as pool:
        yield pool


def _resident_mb(pid: int) -> float:
    size = resident_bytes(pid)
    assert size is not None
    return size / MiB


def test_a_worker_under_the_limit_is_kept(refilling: WorkerPool) -> None:
    first = refilling.submit(jobs.hold, 8 * MiB)
    assert _resident_mb(first) < LIMIT_MB
    assert refilling.submit(jobs.pid) == first


def test_a_worker_grown_past_the_limit_is_replaced_at_once(refilling: WorkerPool) -> None:
    grown = refilling.submit(jobs.hold, (LIMIT_MB + 32) * MiB)
    # stopped before its job's answer came back, and a fresh worker already took its slot
    assert not alive(grown)
    [fresh] = refilling.worker_pids()
    assert fresh != grown
    assert refilling.submit(jobs.pid) == fresh
    assert _resident_mb(fresh) < LIMIT_MB


def test_a_vacated_slot_starts_a_worker_when_a_job_needs_it(vacating: WorkerPool) -> None:
    grown = vacating.submit(jobs.hold, (LIMIT_MB + 32) * MiB)
    assert not alive(grown)
    assert vacating.worker_pids() == []  # nothing held while idle
    fresh = vacating.submit(jobs.pid)
    assert fresh != grown
    assert vacating.worker_pids() == [fresh]
    assert _resident_mb(fresh) < LIMIT_MB


def test_the_settings_shape_both_pools() -> None:
    settings = Settings(worker_recycle_rss_mb=700, document_worker_recycle_rss_mb=300)
    torch = torch_spec(settings)
    documents = document_spec(settings)
    # a fork of the forkserver starts in moments: the torch pool refills only when needed
    assert (torch.recycle_rss_mb, torch.refill_at_once) == (700, False)
    assert (documents.recycle_rss_mb, documents.refill_at_once) == (300, True)
    assert Settings.from_env({"PT2SERDE_WORKER_RECYCLE_RSS_MB": "5"}).worker_recycle_rss_mb == 5


def test_a_torch_worker_grown_past_the_limit_exits_and_the_next_job_runs() -> None:
    settings = Settings(workers=1, worker_memory_mb=0, worker_recycle_rss_mb=0)
    with TorchPool(settings) as probe:
        # what a torch worker holds once started (torch preloaded by the forkserver)
        footprint = _resident_mb(probe.submit(jobs.pid))
    limit = int(footprint) + 64
    with TorchPool(Settings(workers=1, worker_memory_mb=0, worker_recycle_rss_mb=limit)) as pool:
        kept = pool.submit(jobs.hold, 8 * MiB)
        assert pool.worker_pids() == [kept]
        grown = pool.submit(jobs.hold, 128 * MiB)
        assert grown == kept
        assert not alive(grown)
        assert pool.worker_pids() == []
        started = time.monotonic()
        assert pool.submit(job_ping) not in (grown, None)
        # a fresh fork of the warm forkserver: far from a cold start of torch
        assert time.monotonic() - started < 30


def test_the_document_workers_start_with_the_process_when_asked() -> None:
    eager = DocumentRunner(Settings(document_workers=1, document_workers_at_start=True))
    lazy = DocumentRunner(Settings(document_workers=1, document_workers_at_start=False))
    try:
        eager.start()
        lazy.start()
        assert len(eager.get().worker_pids()) == 1
        assert lazy._pool is None
    finally:
        eager.close()
        lazy.close()


def test_a_pool_started_lazily_starts_a_second_worker_only_for_overlapping_jobs(
    tmp_path: Path,
) -> None:
    with WorkerPool(spec(workers=2, preload=(), start_all=False)) as pool:
        [first] = pool.worker_pids()
        # one job at a time: the idle worker is taken, not the vacant slot behind it
        assert {pool.submit(jobs.pid) for _ in range(4)} == {first}
        assert pool.worker_pids() == [first]
        marker = tmp_path / "started"
        with ThreadPoolExecutor(1) as other:
            held = other.submit(pool.submit, jobs.sleep, 2.0, str(marker))
            while not marker.exists():
                time.sleep(0.01)
            second = pool.submit(jobs.pid)
            assert held.result() == first
        assert second != first
        assert pool.worker_pids() == sorted([first, second])
