"""The one pool design, as the document pool uses it: jobs, no torch, recycling, time and memory
limits, workers that end themselves; and the torch pool built on the same design."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import pytest

from app import operations as ops
from app.failure import Failure
from app.jobs import documents as document_jobs
from app.settings import MiB, Settings
from app.workers import worker
from app.workers.clock import JobClock
from app.workers.pool import WorkerPool
from app.workers.runner import DocumentRunner, document_spec
from app.workers.torch import TorchPool, torch_spec
from tests.processes import alive
from tests.workers import jobs
from tests.workers.conftest import spec
from tests.workers.owner import survivors
from tests.zoo import PROGRAM_NAMES


def _failure(pool: WorkerPool, job: Callable[..., object], *args: object) -> Failure:
    with pytest.raises(Failure) as caught:
        pool.submit(job, *args)
    return caught.value


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_document_workers_never_import_torch(documents: WorkerPool) -> None:
    pid, torch_loaded, preloaded = documents.submit(jobs.modules)
    assert pid != os.getpid()
    assert pid in documents.worker_pids()
    assert preloaded  # the document jobs module, and with it every torch-free layer
    assert not torch_loaded


def test_a_document_job_in_a_worker_reads_no_torch(
    documents: WorkerPool, tmp_path: Path, zoo_json: dict[str, bytes]
) -> None:
    path = tmp_path / "doc.json"
    path.write_bytes(zoo_json[PROGRAM_NAMES[0]])
    upload = document_jobs.UploadedProgram(path, "json")
    out = tmp_path / "out"
    name, digests = documents.submit(document_jobs.job_canonical, upload, Settings(), None, out)
    with ops.open_source(path, "json", Settings()) as source:
        expected = ops.canonical(source, Settings())
    assert (name, digests) == (expected.model, expected.vouched())
    assert out.read_bytes() == expected.data
    assert documents.submit(jobs.modules)[1] is False


def test_the_torch_pool_is_the_same_design_with_torch() -> None:
    """Its workers at work: tests/bridge/test_pool.py."""
    settings = Settings(workers=3, worker_imports=("tests.bridge.zoo_ops",), worker_max_jobs=7)
    torch = torch_spec(settings)
    assert issubclass(TorchPool, WorkerPool)
    assert (torch.kind, torch.start_method, torch.workers, torch.max_jobs) == (
        "torch",
        "forkserver",
        3,
        7,
    )
    # torch is preloaded once by the forkserver; a deployment's own imports stay per pool
    assert "torch" in torch.preload
    assert torch.imports == ("tests.bridge.zoo_ops",)
    assert torch.config().parent_death_signal
    documents = document_spec(settings)
    assert documents.start_method == "spawn"
    assert not documents.config().parent_death_signal
    assert not any(name.startswith("torch") for name in documents.preload)


def test_workers_are_recycled_after_max_jobs(bare: WorkerPool) -> None:
    pids = [bare.submit(jobs.pid) for _ in range(5)]
    assert len(set(pids)) >= 2
    assert max(pids.count(pid) for pid in pids) <= 2
    runs = [pid for i, pid in enumerate(pids) if i == 0 or pids[i - 1] != pid]
    assert len(runs) == len(set(runs)), "a replaced worker came back"


def test_timeout_kills_the_job_and_the_next_job_runs(bare: WorkerPool) -> None:
    bare.submit(jobs.pid)  # a started worker: its start-up is not the job's time
    [pid] = bare.worker_pids()
    started = time.monotonic()
    with pytest.raises(Failure) as caught:
        bare.submit(jobs.sleep, 30, timeout_s=1.0)
    assert caught.value.code == "worker-timeout"
    assert "ran past its time limit of 1.0s (document_job_timeout_s=" in caught.value.message
    assert time.monotonic() - started < 5
    assert _gone(pid, 2)
    assert bare.submit(jobs.pid) != pid


def test_time_limit_grows_with_size_up_to_the_ceiling() -> None:
    limits = spec(job_timeout_s=60, job_timeout_base_s=2, job_timeout_per_mb_s=4)
    assert limits.time_limit(0) == 2
    assert limits.time_limit(10 * MiB) == 42
    assert spec(job_timeout_base_s=0).time_limit(MiB) is None  # the ceiling, always
    with WorkerPool(dataclasses.replace(limits, preload=())) as pool:
        pool.submit(jobs.pid)
        # a job given next to nothing (one small int) gets the base 2 s, not the 60 s ceiling
        started = time.monotonic()
        assert _failure(pool, jobs.sleep, 60).code == "worker-timeout"
        assert time.monotonic() - started < 10


def test_memory_limit_refuses_the_allocation_and_replaces_the_worker(bare: WorkerPool) -> None:
    before = bare.submit(jobs.pid)
    failure = _failure(bare, jobs.allocate, 2048 * MiB)
    assert failure.code == "worker-out-of-memory"
    assert before not in bare.worker_pids()
    assert bare.submit(jobs.allocate, MiB) == MiB


def test_a_limit_below_the_footprint_fails_to_start() -> None:
    with WorkerPool(spec(workers=1, preload=(), memory_mb=8)) as pool:
        failure = _failure(pool, jobs.pid)
    assert failure.code == "worker-start-failed"
    assert "document_worker_memory_mb=8 is below the worker's footprint" in failure.message


def test_a_worker_ends_a_job_past_its_deadline_by_itself() -> None:
    """The pool is not there to kill it (as when the API process died): the worker's own watch
    ends it shortly after its job's time limit."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    config = spec(preload=()).config()
    process = ctx.Process(target=worker.worker_main, args=(child, config), daemon=True)
    process.start()
    child.close()
    assert parent.recv() == ("ready",)
    assert process.pid is not None
    # the worker's deadline is on the job's own clock (a loaded host's run-queue wait is not
    # the job's time): read that clock from here until the worker is gone
    clock = JobClock(process.pid)
    parent.send_bytes(ForkingPickler.dumps((jobs.spin, (120,), 0.5)))
    took = 0.0
    deadline = time.monotonic() + 60
    while process.exitcode is None and time.monotonic() < deadline:
        took = clock.elapsed()
        process.join(0.05)
    assert process.exitcode is not None, "the worker ran on past its deadline"
    assert took < 0.5 + worker.SELF_KILL_GRACE_S + 2
    parent.close()


#: A document pool in a process of its own: one busy worker, one idle; prints their pids and
#: blocks in submit.
POOL_SCRIPT = """
import sys
from app.workers.pool import WorkerPool
from tests.workers import jobs
from tests.workers.conftest import spec
from tests.workers.owner import alive, survivors

pool = WorkerPool(spec(workers=2, preload=(), idle_s=0))
pool.submit(jobs.pid)
print(*pool.worker_pids(), flush=True)
pool.submit(jobs.sleep, 120, sys.argv[1])
"""


def test_workers_die_with_the_process_of_their_pool(tmp_path: Path) -> None:
    # the busy one by its watch (parent gone, pipe closed), the idle one by its pipe's end
    assert survivors(POOL_SCRIPT, tmp_path / "started") == []


def test_small_inputs_stay_in_process_large_ones_go_to_a_worker() -> None:
    runner = DocumentRunner(Settings(document_workers=1, document_inline_bytes=100))
    try:
        assert runner.run(100, jobs.pid) == os.getpid()
        assert runner.run(101, jobs.pid) != os.getpid()
    finally:
        runner.close()


def test_a_second_small_job_goes_to_an_idle_worker_while_one_runs_here(tmp_path: Path) -> None:
    """One small job at a time runs in this process (its Python runs one thread at a time); a
    second one meanwhile goes to a worker idle at that moment, or else runs here too: it never
    waits for a worker, nor starts the pool."""
    runner = DocumentRunner(Settings(document_workers=1, document_inline_bytes=100))
    try:
        answers: list[int] = []

        def inline_sleep(marker: Path) -> None:
            answers.append(runner.run(10, jobs.sleep, 1.5, str(marker)))

        def meanwhile(marker: Path) -> int:
            holder = threading.Thread(target=inline_sleep, args=(marker,))
            holder.start()
            _wait_for(marker)
            try:
                answer: int = runner.run(10, jobs.pid)
            finally:
                holder.join()
            return answer

        # the pool not started: here, and the pool stays unstarted
        assert meanwhile(tmp_path / "first") == os.getpid()
        assert runner._pool is None
        assert answers == [os.getpid()]
        worker = runner.run(101, jobs.pid)  # starts the pool
        assert worker != os.getpid()
        assert meanwhile(tmp_path / "second") == worker
        # the only worker busy too: here again, at once
        busy = threading.Thread(target=runner.run, args=(101, jobs.sleep, 3.0, str(tmp_path / "w")))
        busy.start()
        _wait_for(tmp_path / "w")
        began = time.monotonic()
        assert meanwhile(tmp_path / "third") == os.getpid()
        assert time.monotonic() - began < 2.5
        busy.join()
    finally:
        runner.close()


def _wait_for(marker: Path) -> None:
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, f"{marker} never appeared"
        time.sleep(0.01)


def test_submit_if_idle_never_waits_for_a_worker(documents: WorkerPool, tmp_path: Path) -> None:
    worker = documents.submit(jobs.pid)  # started and ready
    assert documents.submit_if_idle(jobs.pid) == (True, worker)
    marker = tmp_path / "started"
    busy = threading.Thread(target=documents.submit, args=(jobs.sleep, 2.0, str(marker)))
    busy.start()
    _wait_for(marker)
    began = time.monotonic()
    assert documents.submit_if_idle(jobs.pid) == (False, None)
    assert time.monotonic() - began < 0.5
    busy.join()
    assert documents.submit_if_idle(jobs.pid) == (True, worker)
