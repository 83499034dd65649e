"""Each library measurement runs in a fresh child of a warm zygote (bench.isolate)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cases import Isolation, measure_program
from bench.isolate import ChildFailed, Zygote
from bench.plan import Plan
from bench.programs import Program, decoder_inputs
from bench.report import timing_row
from bench.run import SETTINGS

#: Filled by the test process and by the jobs: each child starts from the zygote's copy.
_SEEN: list[int] = []


def _remember(value: int) -> list[int]:
    _SEEN.append(value)
    return list(_SEEN)


def _fail() -> None:
    raise ValueError("a job that raises")


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """One zygote for the module (it imports torch once: a few seconds)."""
    with Zygote() as z:
        yield z


def test_a_child_sees_neither_the_parents_objects_nor_an_earlier_childs(zygote: Zygote) -> None:
    zygote.run(os.getpid)  # the zygote is up before the test process makes its objects
    _SEEN.extend(range(1000))
    assert zygote.run(_remember, 1) == [1]
    assert zygote.run(_remember, 2) == [2]
    assert len(_SEEN) == 1000
    pids = {zygote.run(os.getpid) for _ in range(3)}
    assert len(pids) == 3
    assert os.getpid() not in pids


def test_a_job_that_raises_or_dies_is_reported_and_the_next_job_runs(zygote: Zygote) -> None:
    with pytest.raises(ChildFailed, match="raised ValueError: a job that raises"):
        zygote.run(_fail)
    with pytest.raises(ChildFailed, match="died \\(signal SIGABRT\\)"):
        zygote.run(os.abort)
    assert zygote.run(_remember, 3) == [3]


def test_a_failure_in_a_child_gives_fail_rows_not_a_crash(zygote: Zygote, tmp_path: Path) -> None:
    broken = Program("broken", "test", 10, b"{}", tmp_path / "missing.pt2", decoder_inputs)
    plan = Plan(True, SETTINGS, deadline=600)
    measured = measure_program(broken, plan, Isolation(zygote, zygote))
    assert set(measured) == {"parse", "dump", "canonicalize", "validate"}
    for bench, m in measured.items():
        row = timing_row(bench, broken.name, broken.nodes, 2, [("", m)])
        assert row.status == "FAIL", (bench, m)
    assert "raised DocumentInvalid" in (measured["dump"].failure or "")
    assert "FileNotFoundError" in (measured["validate"].failure or "")
