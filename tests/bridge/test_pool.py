"""The torch worker pool: jobs, concurrency, recycling, crashes, timeouts and memory limits."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

import schema
from app.archive import ArchiveFailure
from app.bridge.exported import SerializedProgram
from app.failure import BridgeFailure
from app.jobs.torch import job_deserialize_to_pt2, job_ping, job_torch_check
from app.programs.torch_check import TorchCheck
from app.settings import Settings
from app.tensors.safetensors_io import to_safetensors
from app.tensors.sources import TensorSource
from app.workers.torch import TorchPool
from schema import Issue
from tests.bridge import pool_jobs
from tests.zoo import ZooProgram, outputs_close, register_custom_ops

GiB = 1024**3
MAX_JOBS = 4


@pytest.fixture(scope="module")
def pool() -> Iterator[TorchPool]:
    """Two workers that register the pt2zoo namespace at start, recycled every few jobs."""
    settings = Settings(
        workers=2,
        job_timeout_s=60,
        worker_memory_mb=0,
        worker_max_jobs=MAX_JOBS,
        worker_imports=("tests.bridge.zoo_ops",),
    )
    with TorchPool(settings) as workers:
        yield workers


@pytest.fixture(scope="module")
def bare_pool() -> Iterator[TorchPool]:
    """One worker with a short timeout and an address-space limit, and no extra imports."""
    settings = Settings(workers=1, job_timeout_s=3, worker_memory_mb=1536, worker_max_jobs=50)
    with TorchPool(settings) as workers:
        yield workers


def _archive_source(archive: bytes, folder: Path, names: list[str]) -> TensorSource:
    """The tensors `names` of an archive written to a file, as the service names them."""
    path = folder / "program.pt2"
    path.write_bytes(archive)
    return TensorSource(archive=path, names={name: name for name in names})


def _job_args(
    program: SerializedProgram, archive: bytes, folder: Path
) -> tuple[bytes, TensorSource]:
    return schema.dump(program.doc), _archive_source(archive, folder, list(program.tensors))


def _failure(pool: TorchPool, job: Any, *args: Any) -> BridgeFailure:
    with pytest.raises(BridgeFailure) as caught:
        pool.submit(job, *args)
    return caught.value


def _wait_busy(pool: TorchPool) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        busy = pool.busy_pids()
        if busy:
            return busy[0]
        time.sleep(0.01)
    raise AssertionError("no worker became busy")


def test_jobs_run_and_return(pool: TorchPool) -> None:
    pid, doubled = pool.submit(pool_jobs.double, 21)
    assert doubled == 42
    assert pid != os.getpid()
    assert pool.submit(job_ping) in pool.worker_pids()


def test_concurrent_submissions(pool: TorchPool) -> None:
    with ThreadPoolExecutor(6) as executor:
        results = list(executor.map(lambda x: pool.submit(pool_jobs.double, x), range(6)))
    assert [doubled for _, doubled in results] == [0, 2, 4, 6, 8, 10]
    assert len({pid for pid, _ in results}) >= 2
    assert len(pool.worker_pids()) == 2


def test_workers_are_recycled(pool: TorchPool) -> None:
    pids = Counter(pool.submit(job_ping) for _ in range(3 * MAX_JOBS))
    assert max(pids.values()) <= MAX_JOBS
    assert len(pids) >= 3


def test_failures_cross_back_with_code_class_and_issues(pool: TorchPool) -> None:
    failure = _failure(pool, pool_jobs.fail_with_issues)
    assert type(failure) is pool_jobs.JobFailure
    assert (failure.code, failure.message, failure.issues) == (
        "job-refused",
        "refused on purpose",
        [Issue("bad", "/x", "bad x")],
    )
    plain = _failure(pool, pool_jobs.fail_plainly)
    assert (plain.code, plain.message) == (
        "worker-job-failed",
        "ValueError: plain multi-line error",
    )
    unsent = _failure(pool, pool_jobs.unsendable_result)
    assert unsent.code == "worker-job-failed"
    assert "the result cannot be sent" in unsent.message
    assert _failure(pool, pool_jobs.double, lambda: 1).code == "worker-bad-job"
    assert pool.submit(pool_jobs.double, 1)[1] == 2


@pytest.mark.parametrize("name", ["conv", "custom_op", "dtypes"])
@pytest.mark.parametrize("weights", ["archive", "safetensors"])
def test_deserialize_job_writes_an_archive_torch_loads(
    name: str,
    weights: str,
    pool: TorchPool,
    zoo: dict[str, ZooProgram],
    serialized: dict[str, SerializedProgram],
    archives: dict[str, bytes],
    tmp_path: Path,
) -> None:
    register_custom_ops()
    doc, tensors = _job_args(serialized[name], archives[name], tmp_path)
    if weights == "safetensors":
        path = tmp_path / "weights.safetensors"
        path.write_bytes(to_safetensors(serialized[name].tensors.values()))
        tensors = TensorSource(safetensors=path)
    target = tmp_path / "out" / "program.pt2"
    target.parent.mkdir()
    assert pool.submit(job_deserialize_to_pt2, doc, tensors, target) is None
    assert [p.name for p in target.parent.iterdir()] == [target.name]
    # the archive was written by our own worker from a program this test exported
    loaded = torch.export.load(target)
    program = zoo[name]
    assert outputs_close(loaded.module()(*program.args, **program.kwargs), program.run())


def test_deserialize_job_failures_keep_their_issues(
    pool: TorchPool,
    serialized: dict[str, SerializedProgram],
    archives: dict[str, bytes],
    tmp_path: Path,
) -> None:
    program = serialized["conv"]
    doc, _ = _job_args(program, archives["conv"], tmp_path)
    short = _archive_source(archives["conv"], tmp_path, list(program.tensors)[1:])
    target = tmp_path / "out.pt2"
    failure = _failure(pool, job_deserialize_to_pt2, doc, short, target)
    assert failure.code == "weights-mismatch"
    assert [i.code for i in failure.issues] == ["weight-missing"]
    assert _failure(pool, job_deserialize_to_pt2, b"{}", short, target).code == ("document-invalid")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x02")
    failure = _failure(pool, job_deserialize_to_pt2, doc, TensorSource(safetensors=bad), target)
    assert failure.code == "safetensors-invalid"
    assert not target.exists()


def test_torch_check_job_where_the_namespace_is_registered(
    pool: TorchPool,
    serialized: dict[str, SerializedProgram],
    archives: dict[str, bytes],
    tmp_path: Path,
) -> None:
    assert pool.submit(pool_jobs.registered, "pt2zoo") is True
    args = _job_args(serialized["custom_op"], archives["custom_op"], tmp_path)
    result = pool.submit(job_torch_check, *args)
    assert TorchCheck.from_dict(result) == TorchCheck(torch=torch.__version__.split("+")[0])


def test_torch_check_job_where_the_namespace_never_was(
    bare_pool: TorchPool,
    serialized: dict[str, SerializedProgram],
    archives: dict[str, bytes],
    tmp_path: Path,
) -> None:
    assert bare_pool.submit(pool_jobs.registered, "pt2zoo") is False
    args = _job_args(serialized["custom_op"], archives["custom_op"], tmp_path)
    result = TorchCheck.from_dict(bare_pool.submit(job_torch_check, *args))
    assert [i.code for i in result.issues] == ["op-namespace-unregistered"]
    assert "PT2SERDE_WORKER_IMPORTS" in result.issues[0].message
    assert result.namespaces_to_register == ["pt2zoo"]
    assert [i.code for i in result.unchecked] == ["torch-verifier-failed"]
    # deserialize runs the same job: it fails with the same words, and writes nothing.
    target = tmp_path / "never.pt2"
    failure = _failure(bare_pool, job_deserialize_to_pt2, *args, target)
    assert (failure.code, failure.message) == ("torch-deserialize-failed", result.issues[0].message)
    assert failure.issues == result.issues
    assert not target.exists()


def test_torch_check_job_reads_corrupt_tensors_as_a_failure(
    pool: TorchPool,
    serialized: dict[str, SerializedProgram],
    archives: dict[str, bytes],
    tmp_path: Path,
) -> None:
    program = serialized["conv"]
    data = program.tensors["fc.weight"].data
    archive = archives["conv"]
    assert archive.count(data) == 1
    flipped = bytes([data[0] ^ 0xFF]) + data[1:]
    doc, tensors = _job_args(program, archive.replace(data, flipped), tmp_path)
    with pytest.raises(ArchiveFailure) as caught:
        pool.submit(job_torch_check, doc, tensors)
    assert caught.value.code == "archive-crc-mismatch"


def test_killed_worker_fails_its_job_and_is_replaced(pool: TorchPool) -> None:
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            pool.submit(pool_jobs.sleep, 30)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    pid = _wait_busy(pool)
    os.kill(pid, signal.SIGKILL)
    thread.join(30)
    assert not thread.is_alive()
    [failure] = outcome
    assert isinstance(failure, BridgeFailure)
    assert failure.code == "worker-crashed"
    assert failure.message == f"the worker (pid {pid}) was killed by SIGKILL during the job"
    assert pid not in pool.worker_pids()
    assert len(pool.worker_pids()) == 2
    assert pool.submit(pool_jobs.double, 5)[1] == 10


def test_workers_killed_while_idle_are_replaced_silently(pool: TorchPool) -> None:
    for _ in range(3):
        assert pool.submit(pool_jobs.double, 1)[1] == 2
    idle = pool.worker_pids()
    for pid in idle:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in idle) and time.monotonic() < deadline:
        time.sleep(0.01)
    results = [pool.submit(pool_jobs.double, n)[1] for n in range(4)]
    assert results == [0, 2, 4, 6]
    assert set(pool.worker_pids()).isdisjoint(idle)


def test_segfault_is_a_crash(pool: TorchPool) -> None:
    failure = _failure(pool, pool_jobs.segfault)
    assert failure.code == "worker-crashed"
    assert "SIGSEGV" in failure.message
    assert pool.submit(pool_jobs.double, 3)[1] == 6


def test_timeout_kills_the_job(bare_pool: TorchPool) -> None:
    started = time.monotonic()
    failure = _failure(bare_pool, pool_jobs.sleep, 60)
    assert failure.code == "worker-timeout"
    assert 3 <= time.monotonic() - started < 30
    assert bare_pool.submit(pool_jobs.sleep, 0) in bare_pool.worker_pids()


@pytest.mark.parametrize("job", [pool_jobs.allocate_bytes, pool_jobs.allocate_tensor])
def test_memory_limit(bare_pool: TorchPool, job: Any) -> None:
    before = bare_pool.worker_pids()
    failure = _failure(bare_pool, job, 3 * GiB)
    assert failure.code == "worker-out-of-memory"
    # The worker exits after a refused allocation; the next job runs in a fresh one.
    assert bare_pool.worker_pids() != before
    assert bare_pool.submit(job, 1024) == 1024


def test_limit_below_the_footprint_fails_to_start() -> None:
    with TorchPool(Settings(workers=1, worker_memory_mb=64)) as tight:
        failure = _failure(tight, job_ping)
    assert failure.code == "worker-start-failed"
    assert "worker_memory_mb=64 is below the worker's footprint" in failure.message


def test_close_stops_workers_and_refuses_jobs() -> None:
    small = TorchPool(Settings(workers=1, job_timeout_s=60))
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            small.submit(pool_jobs.sleep, 30)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    pid = _wait_busy(small)
    small.close()
    thread.join(30)
    [failure] = outcome
    assert isinstance(failure, BridgeFailure)
    assert failure.code == "worker-pool-closed"
    assert _failure(small, job_ping).code == "worker-pool-closed"
    assert small.worker_pids() == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    small.close()


def test_a_pool_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        TorchPool(Settings(workers=0))


def test_idle_workers_exit_and_the_next_job_starts_one() -> None:
    settings = Settings(workers=1, job_timeout_s=60, worker_memory_mb=0, worker_idle_s=0.5)
    assert Settings.from_env({"PT2SERDE_WORKER_IDLE_S": "0.5"}).worker_idle_s == 0.5
    with TorchPool(settings) as idle_pool:
        [fresh] = idle_pool.worker_pids()
        time.sleep(1.5)
        # A worker that never ran a job holds nothing of its own: it stays, warm.
        assert idle_pool.worker_pids() == [fresh]
        pid, doubled = idle_pool.submit(pool_jobs.double, 4)
        assert (pid, doubled) == (fresh, 8)
        deadline = time.monotonic() + 15
        while idle_pool.worker_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert idle_pool.worker_pids() == []
        assert not Path(f"/proc/{pid}").exists()
        again, doubled = idle_pool.submit(pool_jobs.double, 5)
        assert doubled == 10
        assert again != pid
        assert idle_pool.worker_pids() == [again]
