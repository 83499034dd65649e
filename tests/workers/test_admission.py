"""Admission control: the estimated memory in flight stays under the budget, a bounded queue
waits, and past it (or past the wait) a request is refused with service-busy and Retry-After."""

from __future__ import annotations

import asyncio
import zipfile
from pathlib import Path

import pytest

from app.settings import Limits, MiB, Settings
from app.workers.admission import (
    BASE_NEED,
    MEMORY_PER_DOCUMENT_BYTE,
    Admission,
    AdmissionFailure,
    document_bytes,
    memory_need,
)


def _admission(budget: int = 100, queue: int = 1, wait_s: float = 5.0) -> Admission:
    return Admission(budget, queue, wait_s, retry_after_s=7)


async def _hold(admission: Admission, need: int, release: asyncio.Event) -> None:
    async with admission.admit(need):
        await release.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_within_the_budget_waiting_then_busy() -> None:
    async def scenario() -> None:
        admission = _admission()
        release = asyncio.Event()
        first = asyncio.create_task(_hold(admission, 80, release))
        await _settle()
        assert admission.in_flight == 80
        second = asyncio.create_task(_hold(admission, 50, asyncio.Event()))
        await _settle()
        assert (admission.in_flight, admission.waiting) == (80, 1)
        with pytest.raises(AdmissionFailure) as caught:
            async with admission.admit(10):
                pass
        assert caught.value.code == "service-busy"
        assert caught.value.headers == {"Retry-After": "7"}
        release.set()
        await first
        await _settle()
        assert (admission.in_flight, admission.waiting) == (50, 0)  # the second got in
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        assert admission.in_flight == 0

    asyncio.run(scenario())


def test_a_wait_past_wait_s_is_busy_and_gives_its_place_back() -> None:
    async def scenario() -> None:
        admission = _admission(queue=4, wait_s=0.1)
        release = asyncio.Event()
        holder = asyncio.create_task(_hold(admission, 100, release))
        await _settle()
        with pytest.raises(AdmissionFailure, match="no room for it within 0.1s"):
            async with admission.admit(1):
                pass
        assert (admission.in_flight, admission.waiting) == (100, 0)
        release.set()
        await holder
        assert admission.in_flight == 0

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_no_budget_behind() -> None:
    async def scenario() -> None:
        admission = _admission(queue=4)
        release = asyncio.Event()
        holder = asyncio.create_task(_hold(admission, 100, release))
        await _settle()
        waiter = asyncio.create_task(_hold(admission, 30, asyncio.Event()))
        await _settle()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        release.set()
        await holder
        assert (admission.in_flight, admission.waiting) == (0, 0)

    asyncio.run(scenario())


def test_a_need_over_the_whole_budget_runs_alone() -> None:
    async def scenario() -> None:
        admission = _admission(queue=0)
        async with admission.admit(10_000):
            assert admission.in_flight == 100
            with pytest.raises(AdmissionFailure):
                async with admission.admit(1):
                    pass
        assert admission.in_flight == 0

    asyncio.run(scenario())


def test_waiters_are_admitted_in_arrival_order() -> None:
    async def scenario() -> None:
        admission = _admission(queue=4)
        order: list[int] = []
        release = asyncio.Event()
        holder = asyncio.create_task(_hold(admission, 100, release))
        await _settle()

        async def one(tag: int, need: int) -> None:
            async with admission.admit(need):
                order.append(tag)

        waiters = [asyncio.create_task(one(tag, 60)) for tag in range(3)]
        await _settle()
        release.set()
        await asyncio.gather(holder, *waiters)
        assert order == [0, 1, 2]

    asyncio.run(scenario())


def test_settings_make_the_admission() -> None:
    settings = Settings(admission_budget_mb=3, admission_queue=2, admission_retry_after_s=9)
    admission = Admission.of(settings)
    assert (admission.budget, admission.queue, admission.retry_after_s) == (3 * MiB, 2, 9)


def test_the_estimate_counts_an_archives_documents_not_its_file(tmp_path: Path) -> None:
    document = b'{"graph": [' + b"0," * 50_000 + b"0]}"
    archive = tmp_path / "program.pt2"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("program/models/model.json", document)
        zf.writestr("program/data/weights/w", b"\0" * 10_000)
    assert archive.stat().st_size < len(document) // 10  # compressed
    assert document_bytes(archive, Limits()) == len(document)
    bare = tmp_path / "doc.json"
    bare.write_bytes(document)
    assert document_bytes(bare, Limits()) == len(document)
    # a zip the reader refuses is counted at its size (its job refuses it at once)
    broken = tmp_path / "broken.pt2"
    broken.write_bytes(b"PK\x03\x04" + b"x" * 100)
    assert document_bytes(broken, Limits()) == 104
    assert memory_need(1000) == BASE_NEED + MEMORY_PER_DOCUMENT_BYTE * 1000
